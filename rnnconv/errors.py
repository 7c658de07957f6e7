"""Errors a user can cause, each carrying the exit code the CLI documents.

The CLI turns any of these into one sentence on stderr and its exit code; nothing
else in the package prints or exits.
"""

import difflib

EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2
EXIT_BACKEND_MISSING = 3
EXIT_INTERNAL = 4


class RnnconvError(Exception):
    exit_code = EXIT_BAD_INPUT


class BadInput(RnnconvError):
    """The file or the arguments are wrong: missing, truncated, contradictory."""


class Unsupported(RnnconvError):
    """The input is well formed but cuDNN (or the target format) cannot express it."""


class BackendMissing(RnnconvError):
    """A framework or library that this command needs is not installed or cannot run."""

    exit_code = EXIT_BACKEND_MISSING


class Mismatch(RnnconvError):
    """Verification ran and the numbers disagree."""

    exit_code = EXIT_MISMATCH


def either(words: list[str] | tuple[str, ...]) -> str:
    """`a`, `a or b`, `a, b or c`: alternatives as a sentence names them."""
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else list(words))


def did_you_mean(asked: str, known: list[str]) -> str:
    """The hint `did you mean 'a' or 'b'? ` naming the known names closest to a wrong one (case aside), or ''."""
    by_case = {name.lower(): name for name in known}
    close = difflib.get_close_matches(asked.lower(), list(by_case), n=2, cutoff=0.5)
    return f"did you mean {' or '.join(repr(by_case[c]) for c in close)}? " if close else ""


def no_such_rnn(what: str, asked: str, known: list[str]) -> BadInput:
    """The error for a name that picks nothing: the closest names first, then every one the file holds."""
    return BadInput(f"{what} {asked!r}; {did_you_mean(asked, known)}it holds: {', '.join(known) or 'none'}")


class SeveralRnns(BadInput):
    """A file that holds several RNNs, read where one was wanted and none was picked. Its advice is for a target
    that takes them all in one .safetensors; `for_target` gives the advice for another (a conversion knows it)."""

    def __init__(self, path: object, held: str):
        super().__init__(
            f"{path} {held}; pick one with --layer, or write them all to one .safetensors "
            f"(rnnconv convert {path} OUT.safetensors)"
        )
        self.path, self.held = path, held

    def for_target(self, title: str, several_in: str | None, name: str) -> BadInput:
        """The advice for writing `title` files: `several_in` is the ending of those that hold several, if any."""
        if several_in is None:
            return BadInput(
                f"{self.path} {self.held}, and {title} files hold one RNN each: pick one with --layer (a file for each)"
            )
        return BadInput(
            f"{self.path} {self.held}; pick one with --layer, or write them all to one {several_in} (rnnconv "
            f"convert {self.path} OUT{several_in} --to {name})"
        )


def several_rnns(path: object, held: str) -> SeveralRnns:
    """The error for a file that holds several RNNs when none was picked; `held` says what it holds. The advice
    works in a batch too, where every source ends in the same suffix: convert that file alone."""
    return SeveralRnns(path, held)


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of an exception's message (its type when it has none), for a one-sentence error."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]


def failure(exc: Exception) -> tuple[int, str]:
    """The exit code of an exception a command ends with, and the sentence it prints (after `error:`, or
    `internal error:` for EXIT_INTERNAL: a bug, whose sentence asks for a report)."""
    if isinstance(exc, RnnconvError):
        return exc.exit_code, str(exc)
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        return EXIT_BAD_INPUT, f"cannot read or write{where}: {exc.strerror or exc}"
    if isinstance(exc, MemoryError):
        return EXIT_BAD_INPUT, "out of memory"
    return EXIT_INTERNAL, (
        f"{type(exc).__name__}: {exc} (a bug in rnnconv; rerun with RNNCONV_DEBUG=1 for the traceback and report it)"
    )
