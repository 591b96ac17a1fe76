"""Device selectors: the subset of CEL Baton evaluates (``SUPPORTED``).

DeviceClasses and requests select devices with CEL expressions. Baton reads
``device.driver`` and ``device.attributes["<domain>"].<name>`` compared with literals,
joined by ``&&``, ``||``, ``!`` and parentheses; anything else is a ``SelectorError``
that names the expression. Where CEL would fail at run time (an attribute the device
lacks, ``<`` between a string and an int), the device does not meet the selector
(Kubernetes fails the whole allocation instead).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from baton.proto.dra import AttributeValue, Device

SUPPORTED = (
    'Baton understands only device.driver and device.attributes["<domain>"].<name> '
    "compared (== != < <= > >=) with a string, int or bool literal, a bool attribute "
    "alone, and these joined by &&, ||, ! and parentheses"
)


Test = Callable[[Device, str], bool | None]  # (device, driver) -> meets it; None: CEL error
Value = Callable[[Device, str], AttributeValue | None]  # None: the device lacks it
_TOKEN = re.compile(
    r"""\s*(?:(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|(?P<int>-?\d+)(?![\w.])"""
    r"""|(?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\].])|(?P<name>[A-Za-z_]\w*))"""
)
_COMPARE: dict[str, Callable[[AttributeValue, AttributeValue], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,  # type: ignore[operator]
    "<=": lambda a, b: a <= b,  # type: ignore[operator]
    ">": lambda a, b: a > b,  # type: ignore[operator]
    ">=": lambda a, b: a >= b,  # type: ignore[operator]
}


class SelectorError(ValueError):
    """A selector outside the CEL subset Baton evaluates: the claim's or class's author's
    to change. ``detail`` says where it leaves the subset."""

    def __init__(self, expression: str, detail: str) -> None:
        super().__init__(f"selector {expression!r}: {SUPPORTED} ({detail})")
        self.expression = expression
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector. ``drivers``: the drivers it requires (``device.driver ==``
    literal, joined by ``&&``); an empty set requires none."""

    test: Test
    drivers: frozenset[str]


def selects(expression: str, device: Device, driver: str) -> bool:
    """Whether ``device`` of ``driver`` meets the CEL ``expression`` (SelectorError when
    the expression is outside the subset)."""
    return compile_selector(expression).test(device, driver) is True


def compile_selector(expression: str) -> Selector:
    found = compiled(expression)
    if isinstance(found, SelectorError):
        raise found
    return found


@lru_cache(maxsize=4096)
def compiled(expression: str) -> Selector | SelectorError:
    try:
        parser = _Parser(expression)
        test, drivers = parser.either()
        if parser.tokens[parser.at][0] != "end":
            raise parser.fail()
    except SelectorError as err:
        return err
    return Selector(test=test, drivers=drivers)


class _Parser:
    """Recursive descent over tokens (kind, value, position); kind "end" closes them."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.tokens: list[tuple[str, str | int, int]] = []
        self.at = 0
        pos = 0
        while expression[pos:].strip():
            m = _TOKEN.match(expression, pos)
            if m is None or m.lastgroup is None:
                rest = expression[pos:].lstrip()
                at = len(expression) - len(rest)
                raise SelectorError(expression, f"unexpected {rest.split()[0][:20]!r} at {at}")
            text = m.group(m.lastgroup)
            value: str | int = int(text) if m.lastgroup == "int" else text
            if m.lastgroup == "str":
                value = self._unquote(text)
            self.tokens.append((m.lastgroup, value, m.start(m.lastgroup)))
            pos = m.end()
        self.tokens.append(("end", "", len(expression)))

    def _unquote(self, text: str) -> str:
        def escape(m: re.Match[str]) -> str:
            if m.group(1) not in "\\\"'":
                raise SelectorError(self.expression, f"escape \\{m.group(1)} in {text}")
            return m.group(1)

        return re.sub(r"\\(.)", escape, text[1:-1])

    def fail(self) -> SelectorError:
        kind, _, pos = self.tokens[self.at]
        what = "the end" if kind == "end" else repr(self.expression[pos:].split()[0][:20])
        return SelectorError(self.expression, f"unexpected {what} at {pos}")

    def take(self, op: str) -> bool:
        if self.tokens[self.at][:2] == ("op", op):
            self.at += 1
            return True
        return False

    def expect(self, kind: str, op: str = "") -> str | int:
        got, value, _ = self.tokens[self.at]
        if got != kind or (op and value != op):
            raise self.fail()
        self.at += 1
        return value

    def either(self) -> tuple[Test, frozenset[str]]:
        test, drivers = self.both()
        while self.take("||"):
            right, more = self.both()
            test, drivers = _join(test, right, wins=True), drivers & more
        return test, drivers

    def both(self) -> tuple[Test, frozenset[str]]:
        test, drivers = self.unary()
        while self.take("&&"):
            right, more = self.unary()
            test, drivers = _join(test, right, wins=False), drivers | more
        return test, drivers

    def unary(self) -> tuple[Test, frozenset[str]]:
        if self.take("!"):
            inner, _ = self.unary()
            return (
                lambda d, driver: None if (v := inner(d, driver)) is None else not v
            ), frozenset()
        if self.take("("):
            found = self.either()
            self.expect("op", ")")
            return found
        start = self.at
        left, kind, const = self.value()
        op = str(self.tokens[self.at][1])
        if self.tokens[self.at][0] == "op" and op in _COMPARE:
            self.at += 1
            right, right_kind, right_const = self.value()
            drivers: frozenset[str] = frozenset()
            if op == "==" and {kind, right_kind} == {"driver", "str"}:
                drivers = frozenset({str(const if right_const is None else right_const)})
            return _compare(_COMPARE[op], left, right, ordered=op not in ("==", "!=")), drivers
        if kind not in ("attribute", "bool"):
            if self.tokens[self.at][1] not in ("", "&&", "||", ")"):
                raise self.fail()  # an operator outside the subset (in, +, a call)
            raise SelectorError(self.expression, f"{self._text(start)} alone is not a condition")
        return (
            lambda d, driver: v if isinstance(v := left(d, driver), bool) else None
        ), frozenset()

    def _text(self, start: int) -> str:
        return repr(self.expression[self.tokens[start][2] : self.tokens[self.at][2]].strip())

    def value(self) -> tuple[Value, str, AttributeValue | None]:
        """A literal or what a device has: how to read it, its kind (str, int, bool, driver,
        attribute) and the literal (None for what a device has)."""
        kind, value, _ = self.tokens[self.at]
        if kind in ("str", "int") or value in ("true", "false"):
            self.at += 1
            literal: AttributeValue = value == "true" if kind == "name" else value
            return (lambda d, driver: literal), "bool" if kind == "name" else kind, literal
        self.expect("name", "device")
        self.expect("op", ".")
        member = self.expect("name")
        if member == "driver":
            return (lambda d, driver: driver), "driver", None
        if member != "attributes":
            self.at -= 1
            raise self.fail()
        self.expect("op", "[")
        domain = self.expect("str")
        self.expect("op", "]")
        if self.take("["):
            name = self.expect("str")
            self.expect("op", "]")
        else:
            self.expect("op", ".")
            name = self.expect("name")
        key = f"{domain}/{name}"
        return (lambda d, driver: d.attributes.get(key)), "attribute", None


def _join(left: Test, right: Test, *, wins: bool) -> Test:
    """``&&`` (``wins`` False) or ``||`` (True), as CEL: the winning value beats an error
    on either side; otherwise an error is an error."""

    def test(d: Device, driver: str) -> bool | None:
        a = left(d, driver)
        if a is wins:
            return wins
        b = right(d, driver)
        return wins if b is wins else (None if a is None or b is None else not wins)

    return test


def _compare(
    op: Callable[[AttributeValue, AttributeValue], bool],
    left: Value,
    right: Value,
    *,
    ordered: bool,
) -> Test:
    def test(d: Device, driver: str) -> bool | None:
        a, b = left(d, driver), right(d, driver)
        if a is None or b is None:
            return None
        if type(a) is not type(b):  # CEL: == across types is false, < is an error
            return None if ordered else op(0, 1)  # op(0, 1): what == / != give unequal values
        return op(a, b)

    return test
