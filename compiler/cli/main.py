"""The `mtpc` command: argument parsing, dispatch, and the one exit-code table.

Each verb lives in its own module with `add_parser(subparsers)` and
`run(args) -> int`. This file turns whatever a verb raises into an exit code:
a `MtpcError` is the user's to fix (rendered without a traceback), an
unreadable file is a usage problem, anything else is a bug in mtpc.

Signals (`mtpc.util.interrupts`): the console script imports this module, so its
top stays light and, when this process is the command, installs the SIGINT/SIGTERM
handlers before anything else; `main` (which also installs them for in-process
callers, and restores what was there) imports the verbs, which pull in onnx and
numpy (most of a second), only after that. From then on an interrupt ends the run
one way, wherever it lands: one line on stderr, exit 130 or 143, and nothing half
written (an interrupted write removes its temporary folder, see `mtpc.output.write`;
a compile interrupted once its package is in place keeps it, and the line says
so). Once `main` has decided how it exits, the command leaves at once, so no
signal can land in the interpreter's shutdown.
"""

from __future__ import annotations

import os
import signal
import sys

from ..util import interrupts
from ..util.interrupts import SIGNAL_NAMES, Interrupted  # noqa: F401  (this module's API too)


def _run_as_the_mtpc_command() -> bool:
    """True when this process is `mtpc` (the console script) or `python -m mtpc`, not a program importing us."""
    entry = sys.modules.get("__main__")
    if getattr(getattr(entry, "__spec__", None), "name", None) == f"{__package__.rpartition('.')[0]}.__main__":
        return True
    return os.path.splitext(os.path.basename(getattr(entry, "__file__", None) or ""))[0] in ("mtpc", "mtpc-script")


# First, before anything else is imported, when this process is the command; `main` installs them
# again (and restores what was there) for a program that calls it in-process.
_COMMAND = _run_as_the_mtpc_command()
if _COMMAND:
    interrupts.install()

try:  # after the handlers, on purpose
    import argparse
    import importlib

    from ..util.version import __version__
    from ..util.diagnostics import Diagnostic, ExitCode, MtpcError
    from .report import err, out, print_json, print_json_error
except Interrupted as interrupt:  # only where our handlers are installed: this process is the command
    sys.stderr.write(f"mtpc: interrupted by {SIGNAL_NAMES[interrupt.signum]}\n")
    sys.stderr.flush()
    os._exit(128 + interrupt.signum)

# Imported by `main` once the signal handlers are in place (see the module's docstring).
VERB_MODULES = ("compile_cmd", "plan", "check", "diff", "inspect_cmd", "schema_cmd", "verify", "tune")
# 128 + SIGPIPE: what a shell reports for a writer whose reader went away (`mtpc diff a b | head -2`).
EXIT_BROKEN_PIPE = 141


class UsageError(Exception):
    """argparse's complaint, carried out of the parser so `main` can also answer it in JSON."""

    def __init__(self, parser: argparse.ArgumentParser, message: str, hint: str | None = None):
        super().__init__(message)
        self.parser, self.message, self.hint = parser, message, hint


class Parser(argparse.ArgumentParser):
    """Raises `UsageError` where argparse would print and exit; its sub-parsers (the verbs) inherit this.
    A mistyped verb, option or choice gets a "did you mean" with the nearest real one."""

    def error(self, message: str):
        raise UsageError(self, message, _did_you_mean(self, message))


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str | None:
    import re

    from ..util.suggest import closest

    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if choice:  # a verb, or the value of an option with choices (`--format jsno`)
        near = closest(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        return f"did you mean {near!r}?" if near else None
    unknown = re.match(r"unrecognized arguments: (.*)$", message)
    if unknown:  # an option the verb does not have (`--fromat`)
        options = [o for o in parser._option_string_actions if o.startswith("--")]
        for word in unknown.group(1).split():
            near = closest(word.partition("=")[0], options) if word.startswith("--") else None
            if near:
                return f"did you mean {near!r}?"
    return None

EPILOG = """\
exit codes (every verb):
  0  nothing to report
  1  findings: invalid spec, failed check, non-empty diff, verify mismatch (warnings do not count)
  2  usage error or unreadable input; a spec whose checkpoint is absent (check --offline checks it
     without); a package verify or tune could not run here (--static-only accepts verify's static
     checks); a package without an MTP head given to tune; an unreadable or empty prompts file
  3  internal error (a bug in mtpc; rerun with --traceback and report it)
  130  interrupted by SIGINT (Ctrl-C); 143 by SIGTERM; one line says what an interrupted compile
     leaves: the folder as it was, or once the new package is in place, that package, complete
  141  stdout or stderr was closed before all was written (`mtpc diff a b | head`), as for a process
     killed by SIGPIPE

examples:
  mtpc compile specs/qwen35-tiny-mtp.yaml -o out/tiny
  mtpc plan specs/qwen35-tiny-mtp.yaml --against out/tiny
  mtpc check out/tiny --format github
  mtpc diff out/old out/new --format markdown
  mtpc inspect ~/models/qwen3.5-0.8b
  mtpc tune out/tiny --prompts my-prompts.txt --threads 4
  mtpc schema genai_config

Run `mtpc VERB --help` for a verb's options and examples.
"""


def build_parser() -> Parser:
    parser = Parser(
        prog="mtpc",
        description="Compile checkpoints that ship a multi-token-prediction (MTP) head into ONNX runtime packages "
        "for onnxruntime-genai and onnx-genai, and check, diff, verify and tune those packages.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mtpc {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name in VERB_MODULES:
        importlib.import_module(f"{__package__}.{name}").add_parser(sub)
    parser.verb_parsers = dict(sub.choices)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one verb; its exit code. As the `mtpc` command, the process exits here (see the module's docstring)."""
    previous = {} if _COMMAND and interrupts.installed() else interrupts.install()
    try:
        try:
            code = _main(argv)
            interrupts.decide()
            interrupts.raise_if_received()  # an interrupt whose exception was lost on the way: it still ends the run
        except Interrupted as interrupt:
            interrupts.decide()
            code = _report_interrupt(interrupt.signum)
        except BrokenPipeError:
            interrupts.decide()
            code = _broken_pipe()
        interrupts.test_point("exiting")  # a signal from here on is not delivered (tests)
    finally:
        if not _COMMAND:
            interrupts.restore(previous)
    if _COMMAND:
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """The command's end: what it printed flushed, then out, without an interpreter shutdown (a second or so of
    freeing modules and joining idle threads, where a Ctrl-C would be answered by no one)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # its reader is gone: what was left to say is lost
            code = EXIT_BROKEN_PIPE
    os._exit(code)


def _report_interrupt(signum: int) -> int:
    outcome = interrupts.outcome()
    try:
        err(f"mtpc: interrupted by {SIGNAL_NAMES.get(signum, signum)}" + (f" ({outcome})" if outcome else ""))
        sys.stderr.flush()
    except BrokenPipeError:
        _silence(sys.stderr)
    return 128 + signum


def _silence(stream) -> None:
    """Point a closed stream at devnull, so the interpreter's final flush does not complain either."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    except (OSError, ValueError):
        pass


def _broken_pipe() -> int:
    # The reader went away (`mtpc diff a b | head`, or of stderr: `mtpc ... 2>&1 | head`): the shell's
    # convention for that, and nothing more to say.
    _silence(sys.stdout)
    try:
        sys.stderr.flush()
    except OSError:  # it was stderr's reader
        _silence(sys.stderr)
    return EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    interrupts.test_point("startup")
    parser = build_parser()  # imports every verb's module
    interrupts.raise_if_swallowed()  # a Ctrl-C lost inside those imports' callbacks ends the run here
    try:
        args = _parse(parser, argv)
    except SystemExit as exit_:  # argparse: 0 after --help / --version
        return int(exit_.code or 0)
    except UsageError as error:
        return _flushed(_report_usage(error, argv))
    fmt = getattr(args, "format", "text")
    try:
        from ..util.progress import quiet_notes

        with quiet_notes(bool(getattr(args, "quiet", False))):
            code = int(args.run(args))
        _flush()
        return code
    except MtpcError as error:
        return _flushed(_report_error(args.verb, fmt, error))
    except BrokenPipeError:
        raise  # answered by `main`
    except OSError as error:
        # The verbs check the paths they are given; what is left is a file they cannot read or write.
        name = error.filename or ""
        what = f"{name}: {error.strerror or error}" if name else str(error)
        return _flushed(_report_error(args.verb, fmt, MtpcError([Diagnostic(what)], ExitCode.USAGE)))
    except Interrupted:
        raise  # answered by `main`
    except KeyboardInterrupt:  # SIGINT raised by Python's own handler, when main() runs where ours are not installed
        return _report_interrupt(signal.SIGINT)
    except Exception as error:  # anything else is ours to fix
        if args.traceback:
            import traceback  # a bug's report only

            traceback.print_exc()
        message = f"internal error: {type(error).__name__}: {error}"
        if fmt == "json":
            diagnostics = [Diagnostic(message).to_json()]
            print_json(args.verb, {"ok": False, "exit_code": int(ExitCode.INTERNAL), "diagnostics": diagnostics, "bug": True})
        elif fmt == "github":
            out(Diagnostic(message, hint="this is a bug in mtpc").github(title=f"mtpc {args.verb}"))
        err(f"mtpc: {message}")
        err("this is a bug in mtpc" + ("" if args.traceback else "; rerun with --traceback to see where it happened"))
        return _flushed(int(ExitCode.INTERNAL))


def _flush() -> None:
    """A closed pipe shows up here, not in the interpreter's final flush."""
    sys.stdout.flush()
    sys.stderr.flush()


def _flushed(code: int) -> int:
    _flush()
    return code


def _parse(parser: Parser, argv: list[str]) -> argparse.Namespace:
    """Like parse_args, but an unknown option is reported by the verb's parser, with the verb's usage."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.verb_parsers[args.verb].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _requested_format(argv: list[str]) -> str:
    """The --format the arguments ask for, even when they cannot be parsed (so the error comes in that format)."""
    for a, b in zip(argv, [*argv[1:], ""]):
        if a.startswith("--format="):
            return a.partition("=")[2]
        if a == "--format":
            return b
    return "text"


def _report_usage(error: UsageError, argv: list[str]) -> int:
    code = int(ExitCode.USAGE)
    error.parser.print_usage(sys.stderr)
    err(f"{error.parser.prog}: error: {error.message}")
    if error.hint:
        err(f"     = hint: {error.hint}")
    verb = error.parser.prog.split()[-1]
    fmt = _requested_format(argv)
    diagnostic = Diagnostic(error.message, hint=error.hint)
    if fmt == "json":
        print_json_error(verb, MtpcError([diagnostic], ExitCode.USAGE))
    elif fmt == "github":
        out(diagnostic.github(title=error.parser.prog))
    return code


def _report_error(verb: str, fmt: str, error: MtpcError) -> int:
    code = int(error.exit_code)
    if fmt == "json":
        print_json_error(verb, error)
    else:
        if fmt == "github":  # an annotation on the pull request, and the full text in the log below
            for d in error.diagnostics:
                out(d.github(title=f"mtpc {verb}"))
        for d in error.diagnostics:
            err(d.render())
    if error.exit_code is ExitCode.INTERNAL:
        err("this is a bug in mtpc")
    return code


if __name__ == "__main__":
    sys.exit(main())
