"""`netattach <command>`: the entry point. Each command lives in a module of its own."""

import argparse
import sys
from collections.abc import Sequence

import netattach


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="netattach", description="Multi-network pods for Kubernetes (a CNI delegating plugin)."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("version", help="print the version")
    demo = commands.add_parser(
        "demo", help="two pods, a bridge and a macvlan network, through netattach-thin"
    )
    demo.add_argument("--keep", action="store_true", help="leave the namespaces for inspection")
    daemon = commands.add_parser("daemon", help="run the node daemon behind the CNI shim")
    daemon.add_argument("--config", required=True, help="the netattach settings file")
    daemon.add_argument(
        "--shim", help="the shim executable to install into cniBinDir (default: none installed)"
    )
    validate = commands.add_parser(
        "validate",
        help="check settings, NetworkAttachmentDefinitions, pod annotations and CNI configs",
    )
    validate.add_argument(
        "files", nargs="+", metavar="FILE", help="YAML or JSON files to check; - reads stdin"
    )
    gc = commands.add_parser(
        "gc", help="delete the attachments of containers whose network namespace is gone"
    )
    gc.add_argument("--config", required=True, help="the netattach settings file")
    install = commands.add_parser(
        "install-cni", help="install the netattach-thin plugin into a CNI bin directory"
    )
    install.add_argument("--bin-dir", required=True, help="the runtime's CNI bin directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(f"netattach {netattach.__version__}")
        return 0
    if args.command == "demo":
        from netattach.cli import demo

        return demo.run(keep=args.keep)
    if args.command == "daemon":
        from netattach.cli import daemon as daemon_cmd

        return daemon_cmd.run(config=args.config, shim=args.shim)
    if args.command == "validate":
        from netattach.cli import validate

        return validate.run(args.files, stdin=sys.stdin, stdout=sys.stdout)
    if args.command == "gc":
        from netattach.cli import sweep

        return sweep.run(config=args.config)
    if args.command == "install-cni":
        from netattach.cli import install

        return install.run(bin_dir=args.bin_dir)
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
