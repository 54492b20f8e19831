"""`netattach <command>`: the entry point. Each command lives in a module of its own.

The same code is the kubectl plugin `kubectl-netattach` (`kubectl netattach status ...`):
`kubectl_main` offers the operator's commands (status, graph, validate, version), and without a
source flag they read the cluster of the user's kubeconfig, as kubectl does.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import netattach
from netattach import logs


def _add_source_flags(parser: argparse.ArgumentParser, default: str) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--socket",
        metavar="PATH",
        help="ask the node daemon on its socket"
        + (" (the default: /run/netattach/netattach.sock)" if default == "daemon" else ""),
    )
    group.add_argument(
        "--config", metavar="FILE", help="read the directory feed of this settings file"
    )
    group.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="read the cluster with this kubeconfig"
        + (" (the default: $KUBECONFIG, else ~/.kube/config)" if default == "cluster" else ""),
    )


def _add_operator_commands(commands: argparse._SubParsersAction, default: str) -> None:  # type: ignore[type-arg]
    status = commands.add_parser(
        "status", help="each pod's attachments and what is wrong with them"
    )
    status.add_argument("pod", nargs="?", metavar="NAMESPACE/POD", help="only this pod")
    status.add_argument("-n", "--namespace", help="only the pods of this namespace")
    status.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table", help="output format"
    )
    _add_source_flags(status, default)
    graph = commands.add_parser(
        "graph", help="draw pods and the networks they are attached to (Graphviz)"
    )
    graph.add_argument("-n", "--namespace", help="only the pods of this namespace")
    graph.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="FILE.svg, FILE.png or FILE.dot"
    )
    _add_source_flags(graph, default)
    validate = commands.add_parser(
        "validate",
        help="check settings, NADs, pods, MultiNetworkPolicies and CNI configs",
    )
    validate.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="YAML or JSON files to check, or directories of them; - reads stdin",
    )
    validate.add_argument(
        "--node",
        action="store_true",
        help="also judge NADs against this machine as its node daemon would at ADD (its "
        "addresses, links, forwarding, bridges and recorded attachments)",
    )
    commands.add_parser("version", help="print the version")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="netattach", description="Multi-network pods for Kubernetes (a CNI delegating plugin)."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_operator_commands(commands, "daemon")
    demo = commands.add_parser(
        "demo",
        help="the node daemon attaches three pods to a bridge and a macvlan network; a policy"
        " blocks and admits traffic; a picture of it all",
    )
    kept = demo.add_mutually_exclusive_group()
    kept.add_argument(
        "--keep",
        action="store_true",
        help="stop before the pods' DEL and leave them attached, with the policy, to inspect",
    )
    kept.add_argument(
        "--clean", action="store_true", help="only remove what an earlier `--keep` left"
    )
    demo.add_argument(
        "--picture",
        default="/tmp/netattach-demo.svg",
        metavar="FILE",
        help="where `netattach graph` draws the pods and networks (.svg, .png or .dot)",
    )
    daemon = commands.add_parser("daemon", help="run the node daemon behind the CNI shim")
    daemon.add_argument("--config", required=True, help="the netattach settings file")
    daemon.add_argument(
        "--shim",
        help="the shim to install into cniBinDir as `netattach` (default: the native shim built"
        " with netattach, else a zipapp of the Python shim)",
    )
    daemon.add_argument(
        "--log-format", choices=logs.FORMATS, default="text", help="log lines as text or JSON"
    )
    daemon.add_argument("--log-level", choices=logs.LEVELS, help="overrides the settings' logLevel")
    controller = commands.add_parser(
        "policy-controller",
        help="run the policy controller: MultiNetworkPolicy peers published for the node daemons",
    )
    controller.add_argument("--kubeconfig", help="default: the pod's service account")
    controller.add_argument("--identity", help="this replica's name (default: $POD_NAME)")
    controller.add_argument(
        "--lease-namespace", help="the Lease's namespace (default: $POD_NAMESPACE, kube-system)"
    )
    controller.add_argument(
        "--log-format", choices=logs.FORMATS, default="text", help="log lines as text or JSON"
    )
    controller.add_argument("--log-level", choices=logs.LEVELS, default="info")
    gc = commands.add_parser(
        "gc", help="delete the attachments of containers whose network namespace is gone"
    )
    gc.add_argument("--config", required=True, help="the netattach settings file")
    install = commands.add_parser(
        "install-cni", help="install the netattach-thin plugin into a CNI bin directory"
    )
    install.add_argument("--bin-dir", required=True, help="the runtime's CNI bin directory")
    admission = commands.add_parser(
        "admission-policy",
        help="the settings' delegatePolicy as a ValidatingAdmissionPolicy and binding (YAML)",
    )
    admission.add_argument("--config", required=True, help="the netattach settings file")
    admission.add_argument(
        "--name", default="netattach-delegate-policy", help="the policy's and binding's name"
    )
    admission.add_argument("-o", "--output", metavar="FILE", help="write here, not to stdout")
    return parser


def build_kubectl_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl netattach",
        description="netattach's operator commands as a kubectl plugin: they read the cluster "
        "of your kubeconfig unless told otherwise.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_operator_commands(commands, "cluster")
    return parser


def _operator_command(args: argparse.Namespace, default: str, prog: str) -> int | None:
    """Run status, graph, validate or version; None for any other command."""
    if args.command == "version":
        print(f"netattach {netattach.__version__}")
        return 0
    if args.command == "validate":
        from netattach.cli import validate

        return validate.run(args.files, stdin=sys.stdin, stdout=sys.stdout, node=args.node)
    if args.command not in ("status", "graph"):
        return None
    from netattach.cli import sources

    source = sources.choose(
        socket_path=args.socket,
        config=args.config,
        kubeconfig=args.kubeconfig,
        default="daemon" if default == "daemon" else "cluster",
    )
    if args.command == "status":
        from netattach.cli import status

        return status.run(
            target=args.pod,
            namespace=args.namespace,
            source=source,
            output=args.output,
            stdout=sys.stdout,
            stderr=sys.stderr,
            prog=f"{prog} status",
        )
    from netattach.cli import graph

    return graph.run(
        output=args.output,
        namespace=args.namespace,
        source=source,
        stdout=sys.stdout,
        stderr=sys.stderr,
        prog=f"{prog} graph",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    done = _operator_command(args, "daemon", "netattach")
    if done is not None:
        return done
    if args.command == "demo":
        try:
            from netattach.cli import demo
        except ModuleNotFoundError as exc:
            if exc.name != "pyroute2":
                raise
            print(
                "netattach demo needs its extra package pyroute2: `make demo` installs it, as"
                " does pip install 'netattach[demo]'",
                file=sys.stderr,
            )
            return 1
        return demo.run(keep=args.keep, picture=Path(args.picture), only_clean=args.clean)
    if args.command == "daemon":
        from netattach.cli import daemon as daemon_cmd

        return daemon_cmd.run(
            config=args.config,
            shim=args.shim,
            log_format=args.log_format,
            log_level=args.log_level,
        )
    if args.command == "policy-controller":
        from netattach.cli import policy_controller

        return policy_controller.run(
            kubeconfig=args.kubeconfig,
            identity=args.identity,
            lease_namespace=args.lease_namespace,
            log_format=args.log_format,
            log_level=args.log_level,
        )
    if args.command == "gc":
        from netattach.cli import sweep

        return sweep.run(config=args.config)
    if args.command == "admission-policy":
        from netattach.cli import admission as admission_cmd

        return admission_cmd.run(config=args.config, name=args.name, output=args.output)
    if args.command == "install-cni":
        from netattach.cli import install

        return install.run(bin_dir=args.bin_dir)
    raise AssertionError(f"unhandled command {args.command!r}")


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl-netattach`: kubectl runs it for `kubectl netattach ...`."""
    args = build_kubectl_parser().parse_args(argv)
    done = _operator_command(args, "cluster", "kubectl netattach")
    if done is None:
        raise AssertionError(f"unhandled command {args.command!r}")
    return done


if __name__ == "__main__":
    sys.exit(main())
