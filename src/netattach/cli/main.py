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
        "demo", help="run the reference CNI plugins through netattach's runtime, end to end"
    )
    demo.add_argument("--plugin-dir", default="/usr/lib/cni", help="where the CNI plugins are")
    demo.add_argument("--keep", action="store_true", help="leave the namespaces for inspection")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(f"netattach {netattach.__version__}")
        return 0
    if args.command == "demo":
        from netattach.cli import demo

        return demo.run(plugin_dir=args.plugin_dir, keep=args.keep)
    raise AssertionError(f"unhandled command {args.command!r}")


if __name__ == "__main__":
    sys.exit(main())
