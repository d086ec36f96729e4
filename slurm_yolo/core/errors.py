"""The library's error types: each carries one line a user can act on."""


def escaped(text: str) -> str:
    """User text as a terminal may show it: every character Python does not call printable (C0 and C1
    controls, bidi overrides and other format characters, line separators) written as repr() writes
    it, so no quoted name or log line can move the cursor, recolour or reorder what a reader sees."""
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in text)


class SlurmYoloError(Exception):
    """Base: the message is one line, shown to the user as it is. ``explain``: what was worked out
    before the refusal (a plan's numbers), which ``--explain`` prints above the error line."""

    explain: tuple[str, ...] = ()


class UsageError(SlurmYoloError):
    """Bad input from the user or the admin's config: nothing was changed."""


class SlurmError(SlurmYoloError):
    """A Slurm command failed; the message carries its own one-line reason."""


class UnreachableError(SlurmError):
    """A Slurm daemon did not answer (slurmdbd or slurmctld down, or too slow): unlike a refusal of
    what was asked, reads can show what they have without it and say so."""


class QuotaError(SlurmYoloError):
    """The account's tokens cannot cover the job."""
