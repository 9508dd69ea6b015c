"""The design records say what is true now, and rfcs/README.md lists every one (issue 28, item 5).

Every record has a ``Status:`` paragraph between its title and its first
section, starting with one of a closed set of words:

* ``accepted``: true as written;
* ``accepted; amended by rfcs/NNNN (what changed)[, rfcs/MMMM (...)]``: true
  except what the named records changed;
* ``superseded by rfcs/NNNN`` (or by a file of the repository): no longer
  true, read the named one instead;
* ``rejected``: considered and not done.

A record whose Status paragraph says it ``Amends``, ``Supersedes`` or
``Replaces`` rfcs/NNNN is named in NNNN's Status paragraph, so the older record
says who changed it.

rfcs/README.md has one row per record, under its subject::

    | [NNNN](NNNN-title.md) | title | status | read now |

The status cell is ``accepted``, ``amended by NNNN, MMMM``, ``superseded by
NNNN`` or ``rejected``; "read now" links the records that say what is true now
(the ones named, a superseded one replaced by its successor), or is ``—``.
Both cells are computed from the records, so every failure below says the
exact row or line to write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RFCS = REPO / "rfcs"
INDEX = RFCS / "README.md"

KINDS = ("accepted", "amended", "superseded", "rejected")
"""The closed set of statuses (``amended`` is written ``accepted; amended by rfcs/NNNN``)."""

_FILE = re.compile(r"^(\d{4})-[^/]+\.md$")
_TITLE = re.compile(r"^#\s+(?:RFC\s+)?\d{4}\s*(?:—|–|:|-)\s*")
_STATUS = re.compile(r"^\**Status\**:\**\s*")
_PASSIVE = re.compile(r"\b(?:amended|superseded|replaced)(?:\s+in\s+part)?\s+by\b", re.IGNORECASE)
_ACTIVE = re.compile(r"\b(?:amends|supersedes|replaces)\b", re.IGNORECASE)
_REF = re.compile(r"(?<![\w./-])(?:rfcs/)?(0\d{3})\b")
_ANY_RFCS_REF = re.compile(r"\brfcs/(\d{4})\b")
_PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.[a-z]+)\b")
_ROW_RECORD = re.compile(r"^\[(\d{4})\]\(([^)\s]+)\)$")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_CELL = re.compile(r"(?<!\\)\|")

_VOCABULARY = (
    "`Status: accepted`, `Status: accepted; amended by rfcs/NNNN (what changed)`, "
    '`Status: superseded by rfcs/NNNN` or `Status: rejected` (rfcs/README.md, "Statuses")'
)


def _clause(text: str, start: int) -> str:
    """The rest of the sentence from ``start``, without what is in parentheses.

    A sentence ends at ``;``, at a ``.`` followed by a space or the end, or at
    the ``)`` that closes a parenthesis it began in. What is in parentheses
    explains (``rfcs/0150 (what changed)``) and names no further record.
    """
    out: list[str] = []
    depth = 0
    for i in range(start, len(text)):
        char = text[i]
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                break
            depth -= 1
        elif depth == 0:
            if char == ";" or (char == "." and (i + 1 == len(text) or text[i + 1].isspace())):
                break
            out.append(char)
    return "".join(out)


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class Record:
    """One design record, as its first lines describe it."""

    number: str
    path: Path
    title: str
    status: str | None
    """The Status paragraph after ``Status:``, joined into one line; None when there is none."""

    @property
    def rel(self) -> str:
        return f"rfcs/{self.path.name}"

    @property
    def kind(self) -> str | None:
        """One of KINDS, or None when the status starts with a word outside the set."""
        if self.status is None:
            return None
        words = self.status.strip().lower()
        if words.startswith("superseded"):
            return "superseded"
        if words.startswith("rejected"):
            return "rejected"
        if words.startswith("accepted"):
            return "amended" if _PASSIVE.search(self.status) else "accepted"
        return None

    @property
    def by(self) -> tuple[str, ...]:
        """The records named after "amended by" / "superseded by" / "replaced by"."""
        if self.status is None:
            return ()
        found: list[str] = []
        for match in _PASSIVE.finditer(self.status):
            found += _REF.findall(_clause(self.status, match.end()))
        return _unique(found)

    @property
    def by_files(self) -> tuple[str, ...]:
        """Files (not records) named after "superseded by", e.g. a page of docs/."""
        if self.status is None:
            return ()
        found: list[str] = []
        for match in _PASSIVE.finditer(self.status):
            clause = _clause(self.status, match.end())
            found += [p for p in _PATH.findall(clause) if not p.startswith("rfcs/")]
        return _unique(found)

    @property
    def acts_on(self) -> tuple[str, ...]:
        """The records this one says it amends, supersedes or replaces."""
        if self.status is None:
            return ()
        found: list[str] = []
        for match in _ACTIVE.finditer(self.status):
            found += _REF.findall(_clause(self.status, match.end()))
        return _unique([n for n in found if n != self.number])

    @property
    def named(self) -> set[str]:
        """Every record the Status paragraph names."""
        if self.status is None:
            return set()
        return set(_ANY_RFCS_REF.findall(self.status)) | set(self.by) | set(self.acts_on)


def _read_record(path: Path) -> Record:
    lines = path.read_text(encoding="utf-8").splitlines()
    number = path.name[:4]
    title = _TITLE.sub("", lines[0]).strip() if lines and lines[0].startswith("#") else ""
    status: str | None = None
    for i, line in enumerate(lines[1:], start=1):
        if line.startswith("## "):
            break
        if _STATUS.match(line):
            paragraph = [_STATUS.sub("", line)]
            for more in lines[i + 1 :]:
                if not more.strip() or more.startswith("#"):
                    break
                paragraph.append(more.strip())
            status = " ".join(part.strip() for part in paragraph)
            break
    return Record(number=number, path=path, title=title, status=status)


@cache
def records() -> dict[str, Record]:
    """Every record in rfcs/, by number."""
    found: dict[str, Record] = {}
    for path in sorted(RFCS.glob("*.md")):
        if _FILE.match(path.name):
            found.setdefault(path.name[:4], _read_record(path))
    return found


def read_now(record: Record, recs: dict[str, Record], seen: frozenset[str] = frozenset()) -> list[str]:
    """The records (and files) to read for what is true now of what ``record`` decided.

    For an amended or superseded record: each record it names, except that a
    named record which is itself superseded gives way to its successors (and
    so on down the chain). A named record's own amendments are on its own row.
    Numbers in order, then files.
    """
    if record.kind not in ("amended", "superseded"):
        return []
    seen = seen | {record.number}
    numbers: list[str] = []
    files = list(record.by_files)
    for number in record.by:
        later = recs.get(number)
        if later is None or number in seen:
            continue
        if later.kind != "superseded":
            numbers.append(number)
            continue
        for item in read_now(later, recs, seen):
            (numbers if item in recs else files).append(item)
    return sorted(set(numbers)) + list(_unique(files))


def status_cell(record: Record) -> str:
    if record.kind == "amended":
        return "amended by " + ", ".join(record.by)
    if record.kind == "superseded":
        return "superseded by " + ", ".join(record.by + record.by_files)
    return record.kind or "?"


def read_now_cell(record: Record, recs: dict[str, Record]) -> str:
    links = [
        f"[{item}]({recs[item].path.name})" if item in recs else f"[{item}](../{item})"
        for item in read_now(record, recs)
    ]
    return ", ".join(links) or "—"


def expected_row(record: Record, recs: dict[str, Record]) -> str:
    title = (record.title or record.path.stem[5:].replace("-", " ")).replace("|", "\\|")
    return f"| [{record.number}]({record.path.name}) | {title} | {status_cell(record)} | {read_now_cell(record, recs)} |"


@dataclass(frozen=True)
class Row:
    line: int
    number: str
    target: str
    cells: tuple[str, ...]


def index_rows() -> list[Row]:
    """The rows of rfcs/README.md whose first cell links a record."""
    rows = []
    for line_no, line in enumerate(INDEX.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.startswith("|"):
            continue
        cells = tuple(cell.strip() for cell in _CELL.split(line.strip())[1:-1])
        match = _ROW_RECORD.match(cells[0]) if cells else None
        if match:
            rows.append(Row(line=line_no, number=match[1], target=match[2], cells=cells))
    return rows


def _needs_status(record: Record) -> bool:
    return record.status is not None and record.kind is not None


# --------------------------------------------------------------------------- the records


def test_every_record_is_a_numbered_file():
    odd = [
        f"rfcs/{p.name}: a record is named NNNN-title.md with the number it was given (or it is README.md)"
        for p in sorted(RFCS.glob("*.md"))
        if p.name != "README.md" and not _FILE.match(p.name)
    ]
    numbers: dict[str, list[str]] = {}
    for p in sorted(RFCS.glob("*.md")):
        if _FILE.match(p.name):
            numbers.setdefault(p.name[:4], []).append(p.name)
    odd += [
        f"rfcs/: {n} is the number of {', '.join(names)}: give each record its own"
        for n, names in numbers.items()
        if len(names) > 1
    ]
    assert len(records()) > 100  # the scan sees the records
    assert not odd, "\n".join(odd)


def test_every_record_has_a_status_line_under_its_title():
    missing = [
        f"{r.rel}: no `Status:` line between its title and its first section; add one under the "
        f"title: {_VOCABULARY}"
        for r in records().values()
        if r.status is None
    ]
    assert not missing, "\n".join(missing)


def test_every_status_is_one_of_the_closed_set():
    problems = []
    for r in records().values():
        if r.status is None:
            continue  # said by the test above
        if r.kind is None:
            problems.append(f"{r.rel}: `Status: {r.status[:60]}` is not one of {_VOCABULARY}")
        elif r.kind in ("amended", "superseded") and not (r.by or r.by_files):
            problems.append(
                f"{r.rel}: `Status: {r.status[:60]}` says {r.kind} but names no record after `by`: "
                "write `amended by rfcs/NNNN (what changed)` or `superseded by rfcs/NNNN`"
            )
    assert not problems, "\n".join(problems)


def test_every_record_a_status_names_exists():
    recs = records()
    problems = []
    for r in recs.values():
        for number in sorted(r.named - set(recs)):
            problems.append(
                f"{r.rel}: its Status line names rfcs/{number}, which is not in rfcs/: fix the number"
            )
        for path in r.by_files:
            if not (REPO / path).exists():
                problems.append(f"{r.rel}: its Status line names {path}, which does not exist: fix the path")
    assert not problems, "\n".join(problems)


def test_a_record_that_amends_another_is_named_in_that_records_status():
    recs = records()
    problems = []
    for r in recs.values():
        for number in r.acts_on:
            older = recs.get(number)
            if older is None or older.status is None:
                continue  # said by the tests above
            if r.number not in older.named:
                problems.append(
                    f"{r.rel} says it amends or supersedes rfcs/{number}, but the Status line of "
                    f"{older.rel} does not name rfcs/{r.number}: add `amended by rfcs/{r.number} "
                    f"(what changed)` to it (or make it `superseded by rfcs/{r.number}` if nothing "
                    f"of it stays true), and update its row in rfcs/README.md"
                )
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- the index


def test_every_record_has_one_row_in_the_index():
    recs = records()
    rows: dict[str, list[int]] = {}
    for row in index_rows():
        rows.setdefault(row.number, []).append(row.line)
    problems = [
        f"rfcs/README.md has no row for {r.rel}: add this row under the subject it belongs to "
        f"(in number order):\n{expected_row(r, recs)}"
        for n, r in recs.items()
        if n not in rows and _needs_status(r)
    ]
    problems += [
        f"rfcs/README.md has no row for {r.rel}: give the record its Status line first (see above), "
        "then the test gives the row"
        for n, r in recs.items()
        if n not in rows and not _needs_status(r)
    ]
    problems += [
        f"rfcs/README.md lists {n} on lines {', '.join(map(str, lines))}: keep one row per record"
        for n, lines in rows.items()
        if len(lines) > 1
    ]
    assert not problems, "\n\n".join(problems)


def test_every_row_names_a_record_that_exists():
    recs = records()
    problems = []
    for row in index_rows():
        record = recs.get(row.number)
        if record is None:
            problems.append(
                f"rfcs/README.md line {row.line}: {row.cells[0]} names no record in rfcs/: "
                "remove the row or fix its number"
            )
            continue
        if row.target != record.path.name:
            problems.append(
                f"rfcs/README.md line {row.line}: {row.cells[0]} links {row.target!r}, but record "
                f"{row.number} is {record.rel}: link [{row.number}]({record.path.name})"
            )
        for cell in row.cells[2:]:
            for text, target in _LINK.findall(cell):
                if not (RFCS / target).exists():
                    problems.append(
                        f"rfcs/README.md line {row.line}: [{text}]({target}) links a file that "
                        f"does not exist: write the row as\n{expected_row(record, recs)}"
                    )
    assert not problems, "\n".join(problems)


def test_every_row_says_what_its_record_says():
    recs = records()
    problems = []
    for row in index_rows():
        record = recs.get(row.number)
        if record is None or not _needs_status(record):
            continue  # said by the tests above
        want = (status_cell(record), read_now_cell(record, recs))
        got = row.cells[2:4] if len(row.cells) == 4 else None
        if len(row.cells) != 4 or not row.cells[1] or got != want:
            problems.append(
                f"rfcs/README.md line {row.line}: the row for {record.rel} does not say what the "
                f"record's Status line says (status {want[0]!r}, read now {want[1]!r}): write it as\n"
                f"{expected_row(record, recs)}"
            )
    assert not problems, "\n\n".join(problems)


def test_the_architecture_overview_points_at_the_index():
    [overview] = RFCS.glob("0175-*.md")
    assert "(README.md)" in overview.read_text(encoding="utf-8"), (
        f"rfcs/{overview.name} is where a newcomer starts: link [rfcs/README.md](README.md), "
        "the index of every record and its status"
    )


# --------------------------------------------------------------------------- the parsing itself


def test_a_status_line_is_read_as_a_newcomer_reads_it():
    def rec(status: str) -> Record:
        return Record(number="0999", path=RFCS / "0999-x.md", title="x", status=status)

    amended = rec(
        "accepted; amended by rfcs/0100 (a connection under 10 s, see rfcs/0041; it fails) and "
        "rfcs/0150 (more). Amends rfcs/0033 (what `agentd check` hides) and rfcs/0083."
    )
    assert amended.kind == "amended"
    assert amended.by == ("0100", "0150")  # not 0041: what is in parentheses explains
    assert amended.acts_on == ("0033", "0083")
    assert amended.named == {"0100", "0150", "0033", "0083", "0041"}

    assert rec("accepted").kind == "accepted"
    assert rec("Accepted. Issue 25, item 2.").kind == "accepted"
    assert rec("accepted. Extends rfcs/0084.").acts_on == ()
    assert rec("accepted (replaces the channel rule of 0051)").acts_on == ("0051",)
    assert rec("superseded by rfcs/0131").by == ("0131",)
    assert rec("superseded by `docs/architecture.md`").by_files == ("docs/architecture.md",)
    assert rec("rejected: a lease needs an API server").kind == "rejected"
    assert rec("draft").kind is None
    assert rec("accepted; amended by the lead").by == ()


def test_read_now_follows_a_chain_of_supersessions():
    def rec(number: str, status: str) -> Record:
        return Record(number=number, path=RFCS / f"{number}-x.md", title="x", status=status)

    recs = {
        "0001": rec("0001", "accepted; amended by rfcs/0002 (a) and rfcs/0003 (b)."),
        "0002": rec("0002", "superseded by rfcs/0006"),
        "0003": rec("0003", "accepted; amended by rfcs/0005 (c)."),
        "0004": rec("0004", "accepted"),
        "0005": rec("0005", "accepted; amended by rfcs/0001 (a cycle)."),
        "0006": rec("0006", "superseded by rfcs/0004 and `docs/README.md`"),
    }
    assert read_now(recs["0001"], recs) == ["0003", "0004", "docs/README.md"]
    assert read_now(recs["0002"], recs) == ["0004", "docs/README.md"]
    assert read_now(recs["0005"], recs) == ["0001"]
    assert read_now(recs["0004"], recs) == []
    assert status_cell(recs["0001"]) == "amended by 0002, 0003"
    assert status_cell(recs["0006"]) == "superseded by 0004, docs/README.md"
    assert read_now_cell(recs["0006"], recs) == "[0004](0004-x.md), [docs/README.md](../docs/README.md)"
