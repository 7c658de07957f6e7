"""Errors a user can cause, each carrying the exit code the CLI documents.

The CLI turns any of these into one sentence on stderr and its exit code; nothing
else in the package prints or exits.
"""

import difflib
import re
from collections.abc import Callable, Iterable

EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2
EXIT_BACKEND_MISSING = 3
EXIT_INTERNAL = 4

# A message is a sentence a person reads, whatever a file holds: it names a few things (`listing`), counts the
# rest, and shows a long name cut (`cut`); `sentence` holds every message to this, the last line of defence.
MESSAGE_LIMIT = 2000  # characters of one message, at most
NAME_LIMIT = 100  # characters of a name a message shows whole
FEW = 5  # names a message lists; the rest are counted
LONGEST_WORD = 300  # characters of a word (a path, a name) a message shows whole: longer is a file's doing
LONG_LIST = 30  # names in a list a message shows whole (rnnconv's own lists of choices are shorter)
_LONG_WORD = re.compile(rf"(?<!\S)\S{{{LONGEST_WORD + 1},}}")  # tried at a word's start only: linear time


def cut(name: object, limit: int = NAME_LIMIT) -> str:
    """A name as a message shows it: whole, or its start, an ellipsis and its length."""
    text = str(name)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def listing(
    names: Iterable[object],
    few: int = FEW,
    show: Callable[[str], str] = str,
    separator: str = ", ",
    longest: int = NAME_LIMIT,
) -> str:
    """Names as a message lists them: a few, each cut to `longest`, then how many more (`a, b, c, d, e and 99,995
    more`)."""
    every = list(names)
    shown = separator.join(show(cut(name, longest)) for name in every[:few])
    return shown + (f" and {len(every) - few:,} more" if len(every) > few else "")


def sentence(text: str) -> str:
    """A message held to what a person reads, in time linear in it: a word over LONGEST_WORD characters cut, a list
    of more than LONG_LIST names (a, b, c, ...) told as its first few and a count, and the whole cut at a word to
    MESSAGE_LIMIT characters; each cut said with an ellipsis and a count."""
    if len(text) <= MESSAGE_LIMIT and not _LONG_WORD.search(text):
        return text
    text = _short_lists(_LONG_WORD.sub(lambda word: cut(word.group()), text))
    if len(text) <= MESSAGE_LIMIT:
        return text
    keep = text.rfind(" ", 0, MESSAGE_LIMIT - 40)
    keep = keep if keep > 0 else MESSAGE_LIMIT - 40
    return f"{text[:keep]} ... ({len(text) - keep:,} more characters)"


def _short_lists(text: str) -> str:
    """Each run of more than LONG_LIST comma-separated words (`x a, b, c, ..., z y`) as its first FEW and a count."""
    parts = text.split(", ")
    out, i = [parts[0]], 1
    while i < len(parts):
        j = i  # parts[i:j] are whole words of a list; parts[j] ends it (a closing word, or its first word)
        while j < len(parts) - 1 and _word(parts[j]) and not parts[j].endswith(tuple(_CLOSING)):
            j += 1
        if j - i + 2 <= LONG_LIST:  # the word before the run and the one ending it are names of the list too
            out.extend(parts[i : j + 1])
        else:
            last, _, rest = (parts[j], "", "") if _word(parts[j]) else parts[j].partition(" ")
            closing = last[len(last.rstrip(_CLOSING + ".:;")) :]  # the list's own bracket and stop stay
            kept = parts[i : i + FEW - 1]
            out.append(f"{', '.join(kept)} and {j - i - len(kept) + 1:,} more{closing}" + (f" {rest}" if rest else ""))
        i = j + 1
    return ", ".join(out)


_CLOSING = ")]}"


def _word(text: str) -> bool:
    return not any(c.isspace() for c in text)


class RnnconvError(Exception):
    """An error a user can cause: its message is one sentence (`sentence`), whatever a file put in it."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, *args: object) -> None:
        super().__init__(*(sentence(a) if isinstance(a, str) else a for a in args))


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
    if len(asked) > NAME_LIMIT:  # no name is close to one this long (and comparing it would take long)
        return ""
    by_case = {name.lower(): name for name in known}
    close = difflib.get_close_matches(asked.lower(), list(by_case), n=2, cutoff=0.5)
    return f"did you mean {' or '.join(repr(cut(by_case[c])) for c in close)}? " if close else ""


def no_such_rnn(what: str, asked: str, known: list[str]) -> BadInput:
    """The error for a name that picks nothing: the closest names first, then every one the file holds."""
    return BadInput(f"{what} {cut(asked)!r}; {did_you_mean(asked, known)}it holds: {listing(known) or 'none'}")


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
        return exc.exit_code, sentence(str(exc))
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        return EXIT_BAD_INPUT, sentence(f"cannot read or write{where}: {exc.strerror or exc}")
    if isinstance(exc, MemoryError):
        return EXIT_BAD_INPUT, "out of memory"
    return EXIT_INTERNAL, (
        f"{type(exc).__name__}: {sentence(str(exc))} (a bug in rnnconv; rerun with RNNCONV_DEBUG=1 for the traceback "
        "and report it)"
    )
