"""The `mtpc` command: argument parsing, dispatch, and the one exit-code table.

Each verb lives in its own module with `add_parser(subparsers)` and
`run(args) -> int`. This file turns whatever a verb raises into an exit code:
a `MtpcError` is the user's to fix (rendered without a traceback), an
unreadable file is a usage problem, anything else is a bug in mtpc.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from .. import __version__
from ..diagnostics import Diagnostic, ExitCode, MtpcError
from . import check, compile_cmd, diff, inspect_cmd, plan, schema_cmd, verify
from .report import err, print_json, print_json_error

VERBS = (compile_cmd, plan, check, diff, inspect_cmd, schema_cmd, verify)
# 128 + SIGPIPE: what a shell reports for a writer whose reader went away (`mtpc diff a b | head -2`).
EXIT_BROKEN_PIPE = 141


class UsageError(Exception):
    """argparse's complaint, carried out of the parser so `main` can also answer it in JSON."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser, self.message = parser, message


class Parser(argparse.ArgumentParser):
    """Raises `UsageError` where argparse would print and exit; its sub-parsers (the verbs) inherit this."""

    def error(self, message: str):
        raise UsageError(self, message)

EPILOG = """\
exit codes (every verb):
  0  nothing to report
  1  findings: invalid spec, failed check, non-empty diff, verify mismatch
  2  usage error or unreadable input
  3  internal error (a bug in mtpc; rerun with --traceback and report it)
  141  stdout was closed early (`mtpc diff a b | head`), as for a process killed by SIGPIPE

examples:
  mtpc compile specs/qwen35-tiny-mtp.yaml -o out/tiny
  mtpc plan specs/qwen35-tiny-mtp.yaml --against out/tiny
  mtpc check out/tiny --format github
  mtpc diff out/old out/new --format markdown
  mtpc inspect ~/models/qwen3.5-0.8b
  mtpc schema genai_config

Run `mtpc VERB --help` for a verb's options and examples.
"""


def build_parser() -> Parser:
    parser = Parser(
        prog="mtpc",
        description="Compile checkpoints that ship a multi-token-prediction (MTP) head into ONNX runtime packages "
        "for onnxruntime-genai and onnx-genai, and check, diff and verify those packages.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mtpc {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in VERBS:
        verb.add_parser(sub)
    parser.verb_parsers = dict(sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        args = _parse(parser, argv)
    except SystemExit as exit_:  # argparse: 0 after --help / --version
        return int(exit_.code or 0)
    except UsageError as error:
        return _report_usage(error, argv)
    fmt = getattr(args, "format", "text")
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # a closed pipe shows up here, not in the interpreter's final flush
        return code
    except MtpcError as error:
        return _report_error(args.verb, fmt, error)
    except BrokenPipeError:
        # The reader went away (`mtpc diff a b | head`): the shell's convention for that, and nothing more to say.
        # Point stdout at devnull so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as error:
        # The verbs check the paths they are given; what is left is a file they cannot read or write.
        name = error.filename or ""
        what = f"{name}: {error.strerror or error}" if name else str(error)
        return _report_error(args.verb, fmt, MtpcError([Diagnostic(what)], ExitCode.USAGE))
    except KeyboardInterrupt:
        err("mtpc: interrupted")
        return 130
    except Exception as error:  # anything else is ours to fix
        if args.traceback:
            traceback.print_exc()
        message = f"internal error: {type(error).__name__}: {error}"
        if fmt == "json":
            diagnostics = [Diagnostic(message).to_json()]
            print_json(args.verb, {"ok": False, "exit_code": int(ExitCode.INTERNAL), "diagnostics": diagnostics, "bug": True})
        err(f"mtpc: {message}")
        err("this is a bug in mtpc" + ("" if args.traceback else "; rerun with --traceback to see where it happened"))
        return int(ExitCode.INTERNAL)


def _parse(parser: Parser, argv: list[str]) -> argparse.Namespace:
    """Like parse_args, but an unknown option is reported by the verb's parser, with the verb's usage."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.verb_parsers[args.verb].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _wants_json(argv: list[str]) -> bool:
    return "--format=json" in argv or any(a == "--format" and b == "json" for a, b in zip(argv, argv[1:]))


def _report_usage(error: UsageError, argv: list[str]) -> int:
    code = int(ExitCode.USAGE)
    error.parser.print_usage(sys.stderr)
    err(f"{error.parser.prog}: error: {error.message}")
    if _wants_json(argv):
        verb = error.parser.prog.split()[-1]
        print_json_error(verb, MtpcError([Diagnostic(error.message)], ExitCode.USAGE))
    return code


def _report_error(verb: str, fmt: str, error: MtpcError) -> int:
    code = int(error.exit_code)
    if fmt == "json":
        print_json_error(verb, error)
    else:
        for d in error.diagnostics:
            err(d.render())
    if error.exit_code is ExitCode.INTERNAL:
        err("this is a bug in mtpc")
    return code


if __name__ == "__main__":
    sys.exit(main())
