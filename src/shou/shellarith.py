"""Arithmetic that evaluates a value the line does not show (shou.shellrisk makes such a line opaque).

Bash evaluates a variable's value as an expression wherever arithmetic names it, recursively, and a subscript
in that value runs its `$(...)`: with a file named `a[$(rm x)]`, `for f in *; do echo $((f)); done` runs `rm x`,
as do `((f))`, `let f`, `$[f]`, `[[ $f -eq 1 ]]`, `declare -i n=$f`, `${a[$f]}`, `${s:$f}`, `${!f}`, `test -v "$f"`
(not `test "$f" -gt 0` nor `printf %d`). So every operand of an arithmetic context must be a number, a special
parameter that is always one (`$#`, `RANDOM`), or a variable whose every assignment in the line is a static value
(whose names are such variables in turn) or an arithmetic result, one of them always run before the use (not in
a branch, a loop's body, a subshell or a function). A substitution, a positional parameter, a glob, input, a
nameref, `eval`, or a name the line never sets (in a nested shell the outer line sets the environment) is opaque.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .bashwords import GLOB, UNKNOWN_OPERAND, arith_operands, node_text, static_word

__all__ = ["Arithmetic"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Always a number (or set by the shell as one): safe in arithmetic unless the line assigns them something else.
_NUMERIC = frozenset({"#", "?", "$", "!", "RANDOM", "SRANDOM", "SECONDS", "LINENO", "BASHPID", "EPOCHSECONDS", "PPID",
                      "UID", "EUID", "BASH_SUBSHELL", "SHLVL", "OPTIND"})
_COMPARE = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_READERS = frozenset({"read", "mapfile", "readarray", "getopts", "printf", "wait"})  # set names from input
_RUNNERS = frozenset({"eval", "trap", "source", ".", "fc"})  # run a string in this shell: any variable may change
# Nodes whose body may not run, or runs in another process: an assignment inside does not hold after them.
_BRANCHES = frozenset({"if_statement", "elif_clause", "else_clause", "case_statement", "case_item", "while_statement",
                       "for_statement", "c_style_for_statement", "do_group", "function_definition", "subshell",
                       "pipeline", "command_substitution", "process_substitution", "ternary_expression"})
_ARITH_ASSIGN = re.compile(r"(?<![\w$#@])([A-Za-z_]\w*)\s*(?:\[[^\]]{0,256}\])?\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)"
                           r"|(?:\+\+|--)\s*([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*(?:\+\+|--)")
_TESTS = frozenset({"binary_expression", "unary_expression", "parenthesized_expression", "negated_expression"})
MAX_WORK = 200_000  # steps deciding uses (names followed, assignments weighed); more is opaque


@dataclass
class _Assignment:
    node: Any  # where it happens (the assignment, or the arithmetic context that assigns)
    value: str | None  # its static value, "0" for an arithmetic result, None when only the running line knows
    append: bool = False  # `x+=...`


@dataclass
class Arithmetic:
    """Collects, node by node, a line's arithmetic contexts and assignments; `reasons()` says which use is unsafe."""

    uses: list[tuple[str, Any]] = field(default_factory=list)  # (a name evaluated, or UNKNOWN_OPERAND; where)
    assigned: dict[str, list[_Assignment]] = field(default_factory=dict)
    integers: set[str] = field(default_factory=set)
    assoc: list[tuple[str, Any]] = field(default_factory=list)  # `declare -A m` (its subscripts are strings)
    subscripts: list[tuple[str, str, Any]] = field(default_factory=list)  # (array, index text, node)
    assignments: list[tuple[str, str, Any]] = field(default_factory=list)  # (name, value text, node): -i's values
    anything: list[str] = field(default_factory=list)  # why any variable may hold anything
    work: int = 0
    outer: tuple[int, int] = (-1, -1)  # the last arithmetic text read: the contexts inside it were read with it

    def see(self, node: Any) -> None:
        """Look at one node of the parsed line."""
        kind = node.type
        # `$((f))` in a here-document is read by the parser as `$(` and a subshell: bash reads it as arithmetic
        arithmetic = kind in ("arithmetic_expansion", "command_substitution") and node.text.startswith((b"$((", b"$["))
        if arithmetic or (kind == "compound_statement" and node.text.startswith(b"((")):
            if self._fresh(node.start_byte, node.end_byte):
                text = node_text(node)
                self._context(text[3:-2] if text.startswith("$((") else text[2:-1] if text.startswith("$[") else
                              text[2:-2], node)
        elif kind == "c_style_for_statement":
            self._for_arithmetic(node)
        elif kind == "subscript":
            name, index = node.child_by_field_name("name"), node.child_by_field_name("index")
            if name is not None and index is not None and self._fresh(index.start_byte, index.end_byte):
                self.subscripts.append((node_text(name), node_text(index), node))
        elif kind == "expansion":
            self._expansion(node)
        elif kind == "array":
            self._array(node)
        elif kind == "test_command":
            self._tests(node)
        elif kind == "variable_assignment":
            self._assignment(node)
        elif kind == "for_statement":
            self._for(node)
        elif kind == "declaration_command":
            self._declaration(node)
        elif kind == "unset_command":
            self._unset(node)

    def _for_arithmetic(self, node: Any) -> None:
        for name in ("initializer", "condition", "update"):  # each its own context: `i=0` holds in the others
            for part in node.children_by_field_name(name):
                if self._fresh(part.start_byte, part.end_byte):
                    self._context(node_text(part), part)

    def _unset(self, node: Any) -> None:
        for child in node.named_children:  # `unset "a[$f]"` evaluates the subscript (bash before 5.2 did)
            word = static_word(child)
            if word is None or "[" in word:
                self._name(word if word is not None else node_text(child), node)

    def command(self, argv: list[tuple[str | None, str]], node: Any) -> None:
        """Look at one command's words (as shou.shellwords reads them) at `node`."""
        statics = [(w or "").rsplit("/", 1)[-1] for w, _ in argv]
        k = 0
        while k < len(statics) - 1 and statics[k] in ("builtin", "command"):
            k += 1
        base, args = statics[k], argv[k + 1:]
        if any(s in _RUNNERS for s in statics[:k + 1]):
            self.anything.append(f"{base}: may set any variable")
        if base == "let":  # its words are evaluated in turn, as one expression joined by commas would be
            for _, raw in args:
                if re.search(r"[*?]", re.sub(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"|\\.", "", raw)):
                    self.uses.append((UNKNOWN_OPERAND, node))  # `let a*`: whatever file names match
            self._context(" , ".join(w if w is not None else r for w, r in args), node)
        elif base in ("test", "["):
            for i, (word, _) in enumerate(args[:-1]):
                if word == "-v":
                    self._name(args[i + 1][0] if args[i + 1][0] is not None else args[i + 1][1], node)
        elif base in _READERS:
            self._read(base, [w for w, _ in args], node)
        elif base == "unset":
            for word, raw in args:
                if word is None or "[" in word:
                    self._name(word if word is not None else raw, node)

    def _read(self, base: str, words: list[str | None], node: Any) -> None:
        """The names a builtin sets from its input (`read a b`, `mapfile m`, `printf -v v`): values no line shows."""
        if base in ("printf", "wait"):  # only `-v NAME`, `-p NAME`
            words = [w for i, w in enumerate(words[1:]) if words[i] in ("-v", "-p")]
        for word in words:
            if word is not None and _NAME.fullmatch(word):
                self.assigned.setdefault(word, []).append(_Assignment(node, None))

    def reasons(self) -> list[str]:
        """Why the line is opaque, if it is: the first unsafe use."""
        for array, index, node in self.subscripts:
            if not any(name == array and self._dominates(at, node) for name, at in self.assoc):
                self._context(index, node)
        for name, value, node in self.assignments:
            if name in self.integers:
                self._context(value, node)
        for name in self.integers:  # `declare -i n; read n`: what it reads is evaluated as it is assigned
            at = next((a.node for a in self.assigned.get(name, []) if a.value is None
                       and a.node.type != "variable_assignment"), None)  # `n=$f`'s text is read above
            if at is not None:
                self.uses.append((UNKNOWN_OPERAND, at))
        for name, node in self.uses:
            if self.work > MAX_WORK:
                return ["arithmetic that takes too much work to read"]
            if name == UNKNOWN_OPERAND:
                return ["arithmetic on a substitution, a positional parameter or a glob, whose value may hold "
                        "`a[$(...)]`"]
            if not (self._named(name[1:], node) if name.startswith("!") and len(name) > 1 else
                    self._safe(name, node, set())):
                if self.work > MAX_WORK:
                    return ["arithmetic that takes too much work to read"]
                why = self.anything[0] if self.anything else "a value the line does not set statically"
                return [f"arithmetic on `{name}` ({why}): its value may hold `a[$(...)]`"]
        return []

    def _named(self, name: str, use: Any) -> bool:
        """Whether `name`'s value, read as a variable's name (`${!name}`), is one the line sets without a subscript."""
        found = self.assigned.get(name, [])
        self.work += len(found) + 1
        return not self.anything and any(self._dominates(a.node, use) for a in found) and all(
            a.value is not None and not re.search(r"[\[$`]", a.value) for a in found)

    def _safe(self, name: str, use: Any, seen: set[str]) -> bool:
        if self.work > MAX_WORK:
            return False
        if name in seen:
            return True  # a loop of names evaluates to an error, never a command
        seen = seen | {name}
        found = self.assigned.get(name, [])
        if name in _NUMERIC and not found:
            return True
        self.work += len(found) + 1
        if self.anything or not found or not any(self._dominates(a.node, use) for a in found):
            return False
        appended = any(a.append for a in found)
        for a in found:
            if a.value is None or (appended and re.search(r"[A-Za-z_]", a.value)):
                return False  # `x=a; x+=b` makes a new name
            operands: list[tuple[str, int]] = []
            arith_operands(a.value, operands)
            self.work += len(a.value)
            if any(o == UNKNOWN_OPERAND or not self._safe(o, use, seen) for o, _ in operands):
                return False
        return True

    def _fresh(self, start: int, end: int) -> bool:
        """Whether the text from `start` to `end` is outside the last expression read (one inside was read with it,
        as text), and so to read: each character is read once, however deep the nesting."""
        if self.outer[0] <= start and end <= self.outer[1]:
            return False
        self.outer = (start, end)
        return True

    def _dominates(self, assignment: Any, use: Any) -> bool:
        steps = _dominates(assignment, use)
        self.work += abs(steps)
        return steps > 0

    def _context(self, text: str, node: Any) -> None:
        """An arithmetic expression: each name it evaluates is a use, each name it assigns holds a number."""
        operands: list[tuple[str, int]] = []
        arith_operands(text, operands)
        sure = not re.search(r"&&|\|\||[?/%]", text)  # else an assignment may not run (or fail: `1/0`)
        found = _ARITH_ASSIGN.finditer(text) if sure else ()
        assigns = [(m.group(1) or m.group(2) or m.group(3), m.end()) for m in found]
        # A name assigned earlier in the same expression (`i=0, i++`) holds a number there.
        self.uses += [(o, node) for o, at in operands if not any(a == o and end <= at for a, end in assigns)]
        for name, _ in assigns:
            self.assigned.setdefault(name, []).append(_Assignment(node, "0"))

    def _name(self, text: str, node: Any) -> None:
        """A variable name bash evaluates the subscript of (`-v NAME`, `unset NAME`, `${!x}`'s value)."""
        m = _NAME.match(text)
        self._context(text[m.end():] if m else text, node)

    def _expansion(self, node: Any) -> None:
        ops = [node.children[i].type for i in range(node.child_count) if node.field_name_for_child(i) == "operator"]
        name = next((c for c in node.children if c.type in ("variable_name", "special_variable_name")), None)
        if "!" in ops and name is not None and not node_text(node).endswith(("*}", "@}")):
            self.uses.append(("!" + node_text(name), node))  # `${!x}`: x's value names a variable, maybe `a[$(...)]`
        if ":" in ops:  # `${s:off:len}`
            text, end = node.text, node.end_byte
            parent = node.parent
            if not text.endswith(b"}") and parent is not None and parent.type == "concatenation":
                text, end = parent.text[node.start_byte - parent.start_byte:], parent.end_byte
            colon = text.index(b":")
            if self._fresh(node.start_byte + colon, end):
                self._context(text[colon + 1:].removesuffix(b"}").decode("utf-8", "surrogatepass"), node)
        if {":=", "="} & set(ops) and name is not None:
            self.assigned.setdefault(node_text(name), []).append(_Assignment(node, None))

    def _array(self, node: Any) -> None:
        parent = node.parent
        target = parent.child_by_field_name("name") if parent is not None else None
        declaration = parent.parent if parent is not None else None
        if declaration is not None and declaration.type == "declaration_command" and "A" in _flags(declaration):
            return
        for child in node.named_children:
            m = re.match(r"\[(.*?)\]\+?=", node_text(child), re.S)
            if m:
                self.subscripts.append(("" if target is None else node_text(target), m.group(1), child))

    def _tests(self, command: Any) -> None:
        """The comparisons of `[[ ]]` evaluate their operands; `-v`, in `[ ]` too, a name's subscript (`[ ]` is the
        test builtin, which compares numbers without evaluating them)."""
        stack, brackets = list(command.named_children), command.children[0].type == "[["
        while stack:  # through `&&`, `!`, `( )` only: what is inside a word is seen node by node
            node = stack.pop()
            if node.type in _TESTS:
                stack += node.named_children
                self._test(node, brackets)

    def _test(self, node: Any, brackets: bool) -> None:
        operator = next((c for c in node.children if c.type == "test_operator"), None)
        if operator is None:
            return
        operands = [c for c in node.named_children if c.id != operator.id]
        if node_text(operator) in _COMPARE and brackets:
            for operand in operands:
                if self._fresh(operand.start_byte, operand.end_byte):
                    self._context(node_text(operand), node)
        elif node_text(operator) == "-v":
            for operand in (o for o in operands if self._fresh(o.start_byte, o.end_byte)):
                word = static_word(operand)
                self._name(word if word is not None else node_text(operand), node)

    def _assignment(self, node: Any) -> None:
        target, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if target is None or (self.outer[0] <= node.start_byte and node.end_byte <= self.outer[1]):
            return  # one inside arithmetic holds a number: its expression's reading counted it
        if target.type == "subscript":
            target = target.child_by_field_name("name") or target
        name = node_text(target)
        append = any(c.type == "+=" for c in node.children)
        if value is None:
            text: str | None = ""
        elif value.type == "arithmetic_expansion":
            text = "0"
        elif value.type == "array":  # `f=(*)`: its elements are globbed, as `for f in *` is
            words = [None if GLOB.search(node_text(c)) and c.type in ("word", "concatenation") else static_word(c)
                     for c in value.named_children]
            text = None if None in words else " ".join(w or "" for w in words)
        else:
            text = static_word(value)  # an assignment's value is not globbed
        self.assigned.setdefault(name, []).append(_Assignment(node, text, append))
        if value is not None:
            self.assignments.append((name, node_text(value), node))

    def _for(self, node: Any) -> None:
        variable = node.child_by_field_name("variable")
        if variable is None:
            return
        values = node.children_by_field_name("value")
        words = [None if GLOB.search(node_text(v)) and v.type in ("word", "concatenation") else static_word(v)
                 for v in values]
        text = None if not values or None in words else " ".join(w or "" for w in words)
        self.assigned.setdefault(node_text(variable), []).append(_Assignment(variable, text))

    def _declaration(self, node: Any) -> None:
        flags = _flags(node)
        if "n" in flags:
            self.anything.append("a nameref")
            for child in node.named_children:  # `declare -n r=$f`: the name r stands for is evaluated
                value = child.child_by_field_name("value") if child.type == "variable_assignment" else None
                if value is not None:
                    word = static_word(value)
                    self._name(word if word is not None else node_text(value), node)
        names = [c.child_by_field_name("name") if c.type == "variable_assignment" else c for c in node.named_children]
        names = [n.child_by_field_name("name") or n if n is not None and n.type == "subscript" else n for n in names]
        for n in names:
            if n is not None and n.type == "variable_name":
                if "i" in flags:
                    self.integers.add(node_text(n))
                if "A" in flags:
                    self.assoc.append((node_text(n), node))


def _flags(declaration: Any) -> str:
    return "".join(node_text(c)[1:] for c in declaration.named_children
                   if c.type == "word" and node_text(c).startswith("-"))





def _dominates(assignment: Any, use: Any) -> int:
    """The steps taken, positive when `assignment` always runs, in this shell, before `use` (else 0 or negative):
    it ends before the use starts, and no node around it but not around the use is a branch, a loop, a subshell, a
    function, or a list it is not first in."""
    if assignment.end_byte > use.start_byte:
        return 0
    child, parent, steps = assignment, assignment.parent, 1
    # One child, not `.text` or `.children` (a copy of the whole declaration at every call: review 49, a 54 KB
    # `declare -i` took 6 s).
    if parent is not None and parent.type == "declaration_command" and parent.child_count \
            and parent.child(0).type == "local":
        while parent is not None and parent.type != "function_definition":
            parent, steps = parent.parent, steps + 1
        if parent is None:
            return -steps  # `local` outside a function sets nothing
        parent = assignment.parent
    while parent is not None and not (parent.start_byte <= use.start_byte and use.end_byte <= parent.end_byte):
        if parent.type in _BRANCHES or (parent.type == "list" and child.id != parent.named_child(0).id):
            return -steps
        if parent.type == "command" and child.type == "variable_assignment":
            return -steps  # `n=1 cmd`: n is cmd's, not the shell's
        child, parent, steps = parent, parent.parent, steps + 1
    return steps

