"""Classification rules: what a message, an exit code, a signal or a pod condition says about a failure.

The engine (`podmortem.core.engine`) decides *who* failed first; this module says *what kind* of failure each
observation is, and whether it is a failure of its own (a *primary*: a Python exception, CUDA out of
memory, an ECC error, SIGSEGV, an OOM kill, a preemption, a lost node) or the echo of someone else's
(a *secondary*: gloo "Connection closed by peer", a collective timeout, a lost rendezvous store, the
SIGTERM of the job's cleanup). Keeping the knowledge here, as data, lets an operator teach podmortem a
new message without a release: a rules file (JSON or YAML, see `load_rules` and docs/engine.md) is put in
front of the built-in `DEFAULT_RULES`, and the first matching rule wins. The built-in rules are themselves
such a file (`rules.yaml`, package data) read by the same `ruleset_from_dict`.

A rule has exactly one matcher and one outcome:

* matchers — ``message`` / ``log`` (regular expressions searched in an error message, resp. in each
  line of a log tail), ``exception_type`` (a regular expression that must match the whole exception
  type name, qualified or not), ``exit_code`` / ``signal`` (numbers), ``reason`` (container
  termination reason), ``disruption`` (DisruptionTarget condition reason), ``phase`` (pod phase or
  status reason);
* outcomes — ``category`` (one of `categories.CATEGORIES`, with ``retryable`` defaulting to the category's)
  for a primary failure, or ``secondary`` (``peer``, ``timeout``, ``store`` or ``teardown``) for a
  failure caused by another member. ``weak: true`` marks a primary that is only believed when no
  stronger primary competes (an unexplained exit code 1, an NCCL error that a dying peer can cause).

Compiling and matching only; `load_rules` is the one function that reads an operator's file, and the
package's own `rules.yaml` is read once, at import.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, cast

import re2  # google-re2: linear-time matching for log tails
import yaml

from podmortem.core.categories import CATEGORIES, RETRYABLE, Category

MatcherKind = Literal["message", "log", "exception_type", "exit_code", "signal", "reason", "disruption", "phase"]
SecondaryKind = Literal["peer", "timeout", "store", "teardown"]

MATCHERS: tuple[MatcherKind, ...] = (
    "message",
    "log",
    "exception_type",
    "exit_code",
    "signal",
    "reason",
    "disruption",
    "phase",
)
SECONDARY_KINDS: tuple[SecondaryKind, ...] = ("peer", "timeout", "store", "teardown")
_REGEX_KINDS = frozenset({"message", "log", "exception_type"})
_NUMBER_KINDS = frozenset({"exit_code", "signal"})
_RULE_KEYS = frozenset(
    {
        *MATCHERS,
        "id",
        "category",
        "retryable",
        "secondary",
        "weak",
        "generic",
        "max_confidence",
        "why",
        "advice",
        "ignore_case",
    }
)

# What a person should do, per category; a rule's own `advice` replaces it.
SECONDARY_WHY: dict[SecondaryKind, str] = {
    "peer": "lost its connection to a peer that had died",
    "timeout": "timed out waiting for a peer in a collective",
    "store": "lost the rendezvous/c10d store",
    "teardown": "was torn down (SIGTERM) after the job had failed",
}


# Parts of a message that differ between the victims of one failure and that no rule keys on.
_VOLATILE = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b|\d{4,}")
_MEMO_SIZE = 4096
_MAX_ALTERNATIVES = 10_000
_MISS = object()


# The memory RE2 may use to compile the set of every log rule (its default, 8 MiB, is too small for that set).
_LOG_SET_MEMORY = 64 << 20


class RulesError(ValueError):
    """A rules file that cannot be used; the message names the file and the offending rule."""


@dataclass(frozen=True)
class Rule:
    id: str
    kind: MatcherKind
    pattern: re.Pattern[str] | None = None  # message, log, exception_type
    # log rules also run on RE2 (google-re2): linear time on any input (bench/engine_speed.py times them).
    fast: Any = field(default=None, compare=False, repr=False)
    fast_source: str = field(default="", compare=False, repr=False)
    values: frozenset[str] = frozenset()  # reason, disruption, phase (lower case)
    numbers: frozenset[int] = frozenset()  # exit_code, signal
    category: Category | None = None
    retryable: bool | None = None
    secondary: SecondaryKind | None = None
    weak: bool = False
    # A catch-all (any Python exception): believed, but a specific rule's finding on the same member
    # (storage full, Xid, an OOM kill in its log) says more about why it failed.
    generic: bool = False
    # The most a verdict this rule decides may say (engine.decide caps its confidence here): below the
    # PermanentFailure threshold (0.9) for words that a failure of another family prints too.
    max_confidence: float = 1.0
    why: str = ""
    advice: str = ""
    operator: bool = False  # from a rules file, not built in

    @property
    def is_primary(self) -> bool:
        return self.category is not None

    @property
    def is_retryable(self) -> bool | None:
        if self.retryable is not None:
            return self.retryable
        return RETRYABLE[self.category] if self.category is not None else None

    def describe(self) -> str:
        if self.why:
            return self.why
        if self.secondary is not None:
            return SECONDARY_WHY[self.secondary]
        return self.category or ""

    def matches_text(self, text: str) -> bool:
        if self.fast is not None:
            return self.fast.search(text) is not None
        return self.pattern is not None and self.pattern.search(text) is not None

    def search(self, text: str) -> Any:
        """The first match in `text` (RE2 for log rules), or None."""
        if self.fast is not None:
            return self.fast.search(text)
        return self.pattern.search(text) if self.pattern is not None else None

    def matches_type(self, exception_type: str) -> bool:
        if self.pattern is None or not exception_type:
            return False
        short = exception_type.rsplit(".", 1)[-1]
        return self.pattern.fullmatch(exception_type) is not None or self.pattern.fullmatch(short) is not None


@dataclass(frozen=True)
class RuleSet:
    """An ordered list of rules; the first rule that matches wins (operator rules come first)."""

    rules: tuple[Rule, ...]
    source: str = "built-in"
    _by_kind: dict[str, tuple[Rule, ...]] = field(default_factory=dict, compare=False, repr=False)
    _memo: dict[tuple[str, str], object] = field(default_factory=dict, compare=False, repr=False)
    _log_set: list[Any] = field(default_factory=list, compare=False, repr=False)  # [re2.Set of the log rules]

    def __post_init__(self) -> None:
        grouped: dict[str, list[Rule]] = {}
        for r in self.rules:
            grouped.setdefault(r.kind, []).append(r)
            if r.kind in ("message", "exception_type"):
                grouped.setdefault("text", []).append(r)
        self._by_kind.update({k: tuple(v) for k, v in grouped.items()})
        # Every log rule in one RE2 set: one pass over a tail says which rules match anywhere in it.
        logs = self._by_kind.get("log", ())
        # RE2's default budget (8 MiB) bounds the compiled program of the whole set, which every log rule adds to;
        # the set is compiled once per rules file, and matching stays linear whatever the budget (bench.engine_speed).
        options = re2.Options()
        options.max_mem = _LOG_SET_MEMORY
        matcher = re2.Set.SearchSet(options)
        for r in logs:
            matcher.Add(r.fast_source)
        matcher.Compile()
        self._log_set.append(matcher)

    def first_log_rule(self, text: str | bytes) -> Rule | None:
        """The first log rule, in rule order, that matches anywhere in `text` (one RE2 pass; UTF-8 bytes
        are searched as they are, a str is encoded first)."""
        logs = self._by_kind.get("log", ())
        if not logs:
            return None
        hits = self._log_set[0].Match(text)
        return logs[min(hits)] if hits else None

    def of_kind(self, kind: MatcherKind) -> tuple[Rule, ...]:
        return self._by_kind.get(kind, ())

    def classify_message(self, message: str, exception_type: str = "") -> Rule | None:
        """The first message or exception-type rule, in rule order, that matches an error message.

        Memoised: the victims of one failure write near-identical messages that differ only in peer
        addresses, ports, pids and durations, so messages equal up to IPv4 addresses and numbers of four
        or more digits share one classification (rules must not key on such numbers; see docs/engine.md).
        """
        text = message or ""
        key = (_VOLATILE.sub("#", text), exception_type)
        hit = self._memo.get(key, _MISS)
        if hit is not _MISS:
            return cast(Rule | None, hit)
        found: Rule | None = None
        for r in self._by_kind.get("text", ()):
            if r.matches_text(text) if r.kind == "message" else r.matches_type(exception_type):
                found = r
                break
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[key] = found
        return found

    def classify_log_line(self, line: str) -> Rule | None:
        return self.first_log_rule(line)

    def classify_exit_code(self, code: int) -> Rule | None:
        for r in self.of_kind("exit_code"):
            if code in r.numbers:
                return r
        return None

    def classify_signal(self, signal: int) -> Rule | None:
        for r in self.of_kind("signal"):
            if signal in r.numbers:
                return r
        return None

    def _by_value(self, kind: MatcherKind, *values: str) -> Rule | None:
        wanted = {v.lower() for v in values if v}
        if not wanted:
            return None
        for r in self.of_kind(kind):
            if r.values & wanted:
                return r
        return None

    def classify_reason(self, reason: str) -> Rule | None:
        return self._by_value("reason", reason)

    def classify_disruption(self, reason: str) -> Rule | None:
        return self._by_value("disruption", reason)

    def classify_phase(self, phase: str, reason: str = "") -> Rule | None:
        return self._by_value("phase", phase, reason)

    def extended_by(self, operator: RuleSet) -> RuleSet:
        """Operator rules in front of these; the result keeps both sources in its name."""
        return RuleSet(operator.rules + self.rules, source=f"{operator.source} + {self.source}")


# --------------------------------------------------------------------------------------------------
# Building rules from plain data (the built-in table below and rules files share this path).


def _fail(source: str, where: str, problem: str) -> RulesError:
    return RulesError(f"{source}: {where}: {problem}")


def _as_numbers(value: Any, source: str, where: str, kind: str) -> frozenset[int]:
    items = value if isinstance(value, list) else [value]
    out: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise _fail(source, where, f"'{kind}' must be an integer or a list of integers, got {item!r}")
        out.add(item)
    if not out:
        raise _fail(source, where, f"'{kind}' is an empty list")
    return frozenset(out)


def _as_strings(value: Any, source: str, where: str, kind: str) -> frozenset[str]:
    items = value if isinstance(value, list) else [value]
    out: set[str] = set()
    for item in items:
        if not isinstance(item, str) or not item:
            raise _fail(source, where, f"'{kind}' must be a non-empty string or a list of them, got {item!r}")
        out.add(item.lower())
    if not out:
        raise _fail(source, where, f"'{kind}' is an empty list")
    return frozenset(out)


def _alternatives(value: Any, source: str, where: str, kind: str) -> str:
    """A regular expression given as a string, or as a list of alternatives (nested lists flattened, so a YAML
    anchor can share alternatives between rules) joined with `|`."""
    if isinstance(value, str) and value:
        return value
    parts: list[str] = []
    pending = [value] if isinstance(value, list) else []
    budget = _MAX_ALTERNATIVES  # a YAML alias can make a list contain itself
    while pending and budget > 0:
        budget -= 1
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(reversed(item))
        elif isinstance(item, str) and item:
            parts.append(item)
        else:
            parts = []
            break
    if not parts or pending:
        raise _fail(
            source,
            where,
            f"'{kind}' must be a non-empty regular expression string, or a list of non-empty alternatives",
        )
    return "|".join(parts)


def rule_from_dict(doc: Mapping[str, Any], source: str = "built-in", index: int = 0, operator: bool = False) -> Rule:
    """One rule from its JSON form; raises RulesError naming `source` and the rule on any problem."""
    where = f"rule #{index + 1}"
    if not isinstance(doc, Mapping):
        raise _fail(source, where, f"must be an object, got {type(doc).__name__}")
    rid = doc.get("id")
    if not isinstance(rid, str) or not rid.strip():
        raise _fail(source, where, "needs a non-empty string 'id'")
    where = f"rule #{index + 1} ({rid!r})"
    unknown = sorted(set(doc) - _RULE_KEYS)
    if unknown:
        raise _fail(source, where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_RULE_KEYS))}")
    kinds = [k for k in MATCHERS if k in doc]
    if len(kinds) != 1:
        raise _fail(source, where, f"needs exactly one matcher of {', '.join(MATCHERS)}; found {kinds or 'none'}")
    kind = kinds[0]
    raw = doc[kind]
    pattern: re.Pattern[str] | None = None
    fast: Any = None
    fast_source = ""
    numbers: frozenset[int] = frozenset()
    values: frozenset[str] = frozenset()
    if kind in _REGEX_KINDS:
        raw = _alternatives(raw, source, where, kind)
        ignore_case = doc.get("ignore_case", kind != "exception_type")
        if not isinstance(ignore_case, bool):
            raise _fail(source, where, "'ignore_case' must be true or false")
        try:
            flags = (re.IGNORECASE if ignore_case else 0) | (re.MULTILINE if kind == "log" else 0)
            pattern = re.compile(raw, flags)
        except re.error as exc:
            raise _fail(source, where, f"'{kind}' is not a valid regular expression: {exc}") from None
        if kind == "log":
            fast_source = ("(?i)" if ignore_case else "") + "(?m)" + raw
            try:
                fast = re2.compile(fast_source)
            except re2.error as exc:
                raise _fail(
                    source, where, f"'log' must be RE2 syntax (no backreferences or lookaround: linear time): {exc}"
                ) from None
    elif kind in _NUMBER_KINDS:
        numbers = _as_numbers(raw, source, where, kind)
    else:
        values = _as_strings(raw, source, where, kind)
    category = doc.get("category")
    secondary = doc.get("secondary")
    if (category is None) == (secondary is None):
        raise _fail(source, where, "needs exactly one outcome: 'category' (a primary failure) or 'secondary'")
    if category is not None and category not in CATEGORIES:
        raise _fail(source, where, f"unknown category {category!r}; one of {', '.join(CATEGORIES)}")
    if secondary is not None and secondary not in SECONDARY_KINDS:
        raise _fail(source, where, f"unknown secondary kind {secondary!r}; one of {', '.join(SECONDARY_KINDS)}")
    retryable = doc.get("retryable")
    if retryable is not None and not isinstance(retryable, bool):
        raise _fail(source, where, "'retryable' must be true or false")
    if retryable is not None and secondary is not None:
        raise _fail(source, where, "'retryable' only applies to a rule with a 'category'")
    weak = doc.get("weak", False)
    if not isinstance(weak, bool):
        raise _fail(source, where, "'weak' must be true or false")
    generic = doc.get("generic", False)
    if not isinstance(generic, bool):
        raise _fail(source, where, "'generic' must be true or false")
    max_confidence = doc.get("max_confidence", 1.0)
    if isinstance(max_confidence, bool) or not isinstance(max_confidence, int | float) or not 0 < max_confidence <= 1:
        raise _fail(source, where, "'max_confidence' must be a number in (0, 1]")
    if max_confidence != 1.0 and category is None:
        raise _fail(source, where, "'max_confidence' only applies to a rule with a 'category'")
    for key in ("why", "advice"):
        if key in doc and not isinstance(doc[key], str):
            raise _fail(source, where, f"'{key}' must be a string")
    return Rule(
        id=rid,
        kind=kind,
        pattern=pattern,
        fast=fast,
        fast_source=fast_source,
        values=values,
        numbers=numbers,
        category=cast(Category | None, category),
        retryable=retryable,
        secondary=cast(SecondaryKind | None, secondary),
        weak=weak,
        generic=generic,
        max_confidence=float(max_confidence),
        why=str(doc.get("why", "")),
        advice=str(doc.get("advice", "")),
        operator=operator,
    )


def ruleset_from_dict(doc: Any, source: str = "built-in", operator: bool = False) -> tuple[RuleSet, bool]:
    """(rules, replace_defaults) from a decoded rules document (JSON or YAML; the built-in rules are one)."""
    if not isinstance(doc, dict):
        raise RulesError(f"{source}: the top level must be an object (mapping) with a 'rules' list")
    # `definitions` holds what rules refer to (YAML anchors); `comment` is free text. Neither is read here.
    unknown = sorted(set(doc) - {"rules", "replace_defaults", "comment", "version", "definitions"})
    if unknown:
        raise RulesError(
            f"{source}: unknown top-level key(s) {', '.join(unknown)}; allowed: rules, replace_defaults, definitions"
        )
    version = doc.get("version", 1)
    if version != 1:
        raise RulesError(f"{source}: unsupported 'version' {version!r} (this podmortem reads version 1)")
    items = doc.get("rules")
    if not isinstance(items, list):
        raise RulesError(f"{source}: 'rules' must be a list of rule objects")
    replace = doc.get("replace_defaults", False)
    if not isinstance(replace, bool):
        raise RulesError(f"{source}: 'replace_defaults' must be true or false")
    rules = tuple(rule_from_dict(item, source, i, operator) for i, item in enumerate(items))
    seen: set[str] = set()
    for r in rules:
        if r.id in seen:
            raise RulesError(f"{source}: rule id {r.id!r} is used twice")
        seen.add(r.id)
    return RuleSet(rules, source=source), replace


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise RulesError(f"{source}: not valid YAML ({exc.problem}{at})") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise RulesError(f"{source}: not valid YAML ({exc})") from None


def load_rules(path: str | Path, defaults: RuleSet | None = None) -> RuleSet:
    """Read an operator rules file (JSON, or YAML when it ends in .yaml/.yml) and put its rules in front of the
    defaults.

    Raises RulesError with a one-line message naming the file (and rule) for a missing, unreadable or
    invalid file. With ``"replace_defaults": true`` the built-in rules are dropped entirely.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RulesError(f"{p}: rules file not found") from None
    except IsADirectoryError:
        raise RulesError(f"{p}: is a directory, expected a JSON or YAML rules file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RulesError(f"{p}: cannot read rules file: {exc}") from None
    if p.suffix.lower() in (".yaml", ".yml"):
        doc = _parse_yaml(text, str(p))
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RulesError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
        except RecursionError:  # json's decoder recurses once per level of nesting
            raise RulesError(f"{p}: not valid JSON (nested too deeply)") from None
    operator, replace = ruleset_from_dict(doc, source=str(p), operator=True)
    if replace:
        return operator
    return (defaults or DEFAULT_RULES).extended_by(operator)


# --------------------------------------------------------------------------------------------------
# The built-in rules: data shipped with the package (rules.yaml), in the format of an operator's rules file and
# read by the same function.

BUILTIN_FILE = "rules.yaml"


def _builtin() -> RuleSet:
    text = resources.files(__package__).joinpath(BUILTIN_FILE).read_text(encoding="utf-8")
    rules, _ = ruleset_from_dict(_parse_yaml(text, f"built-in ({BUILTIN_FILE})"), source="built-in")
    return rules


DEFAULT_RULES: RuleSet = _builtin()


def rule_ids(rules: Iterable[Rule]) -> list[str]:
    return [r.id for r in rules]
