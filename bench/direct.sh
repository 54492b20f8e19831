#!/usr/bin/env bash
# The floor: run one CNI plugin directly, as a runtime's shell script would, and print how long
# the plugin took in nanoseconds; the plugin's stdout goes to OUT_FILE. Usage:
#   direct.sh COMMAND NODE_NETNS POD_NETNS CONTAINER_ID IFNAME PLUGIN_DIR PLUGIN CONF_FILE OUT_FILE
set -euo pipefail
command=$1 node=$2 pod=$3 cid=$4 ifname=$5 plugin_dir=$6 plugin=$7 conf=$8 out=$9
export CNI_COMMAND=$command CNI_CONTAINERID=$cid CNI_NETNS=$pod CNI_IFNAME=$ifname
export CNI_PATH=$plugin_dir CNI_ARGS="IgnoreUnknown=1"
start=$(date +%s%N)
nsenter --net="$node" -- "$plugin_dir/$plugin" <"$conf" >"$out"
end=$(date +%s%N)
echo $((end - start))
