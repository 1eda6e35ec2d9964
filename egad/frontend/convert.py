"""`egad.function`: native Python control flow on traced values, by converting the
function's source (as TF's AutoGraph does).

Two passes over the function's AST:

1. *Flags* (plain Python in, plain Python out): `break`, `continue` and `return`
   inside loops or branches become assignments to flag variables, the statements
   after them are guarded by `if not flag:`, and loop conditions test the flags.
   What comes out has no jumps left, only structured `if`/`while`/`for`.
2. *Functionalize*: each `if`/`while`/`for` becomes nested functions over the
   variables the statement assigns, and a call to a runtime helper
   (egad/frontend/convert_runtime.py) that runs Python's statement on concrete
   values and an egad combinator on traced ones. `and`/`or`/`not`, chained
   comparisons and `x if c else y` become runtime calls too, with the operands
   Python may skip as thunks. A variable a nested def or lambda reads is shared
   (`nonlocal`) by the generated functions rather than passed to them, so the
   closure sees its current value; names bound by `:=` in a thunk or a `while`
   test are carried out explicitly.

Every generated node keeps the line of the statement it came from and the code is
compiled under the original file name, so errors, IR source locations and
tracebacks point at the user's own lines.
"""
from __future__ import annotations

import ast
import copy
import functools
import inspect
import itertools
import sys
import textwrap
import types

from ..errors import UnsupportedError, message
from ..source import SourceLoc
from . import context
from . import convert_runtime

RUNTIME = "__egad_ag__"
RETURN_VALUE_PREFIX = convert_runtime.RETURN_VALUE_PREFIX
# FunctionDef grew a required `type_params` field in Python 3.12.
_FUNCTION_EXTRA = {"type_params": []} if sys.version_info >= (3, 12) else {}
_counter = itertools.count()


def function(fn=None, /):
    """Let `fn` use Python `if`/`while`/`for`/`break`/`continue`/`return` on traced
    values. Traced (`egad.trace(f, ...)`), its source is converted into egad's
    combinators; called on numpy values, it runs `fn` itself.

    Example:
        @egad.function
        def newton(x):
            y = x
            while enp.abs(y * y - x) > 1e-9:
                y = 0.5 * (y + x / y)
            return y
    """
    if fn is None:
        return function
    if getattr(fn, "__egad_converted__", False):
        return fn
    if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn):
        raise UnsupportedError(message(
            f"egad.function cannot convert {fn.__name__}: it is a generator (`yield`) or a coroutine",
            where=f"{fn.__code__.co_filename}:{_first_yield_line(fn)}",
            instead="write it as a plain function returning arrays"))
    converted = None

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        nonlocal converted
        if context.current() is None:
            return fn(*args, **kwargs)
        if converted is None:
            converted = convert(fn)
        return converted(*args, **kwargs)

    wrapper.__egad_converted__ = True
    wrapper.__egad_original__ = fn
    return wrapper


def _first_yield_line(fn) -> int:
    """The line of fn's first `yield` (its first line if the source is unavailable)."""
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return fn.__code__.co_firstlineno
    yields = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await))]
    return first + min(yields) - 1 if yields else first


def convert(fn):
    """The converted version of `fn` (same signature and globals, and the same closure cells)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        filename = inspect.getsourcefile(fn) or "<unknown>"
        first_line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError) as error:
        raise UnsupportedError(message(f"egad.function needs the source of {getattr(fn, '__name__', fn)!r}: {error}",
                                       instead="define the function in a file (not in an interactive prompt or exec)"))
    module = ast.parse(source)
    definition = next((node for node in module.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if definition is None or definition.name != fn.__name__:
        raise UnsupportedError(message(f"egad.function cannot find the definition of {fn.__name__} in its source "
                                       "(lambdas cannot be converted)", instead="use a def statement"))
    ast.increment_lineno(definition, first_line - 1)
    definition.decorator_list = []
    _FunctionConverter(filename).convert_function(definition)
    free = fn.__code__.co_freevars
    factory = ast.FunctionDef(
        name="__egad_factory", args=ast.arguments(posonlyargs=[], args=[ast.arg(a) for a in (*free, RUNTIME)],
                                                  kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[definition, ast.Return(ast.Name(definition.name, ast.Load()))], decorator_list=[], returns=None,
        **_FUNCTION_EXTRA)
    ast.copy_location(factory, definition)
    wrapper_module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(wrapper_module)
    code = compile(wrapper_module, filename, "exec")
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    # The factory only gives the converted code the original's free variable names; the
    # function is built on the original's own cells, so that `nonlocal` writes reach the
    # enclosing scope and a variable rebound (or first bound) after the conversion is seen.
    converted_code = next(c for c in factory_code.co_consts
                          if isinstance(c, types.CodeType) and c.co_name == definition.name)
    cells = dict(zip(free, fn.__closure__ or ()))
    cells[RUNTIME] = types.CellType(convert_runtime)
    converted = types.FunctionType(converted_code, fn.__globals__, fn.__name__, fn.__defaults__,
                                   tuple(cells[name] for name in converted_code.co_freevars))
    converted.__kwdefaults__ = fn.__kwdefaults__
    converted.__qualname__ = fn.__qualname__
    return converted


# --- analysis ------------------------------------------------------------------------

def assigned_names(statements) -> list[str]:
    """Names a block assigns in its own scope (not inside nested functions), in order."""
    names: list[str] = []

    def add(name):
        if name not in names:
            names.append(name)

    class Visitor(ast.NodeVisitor):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Store):
                add(node.id)

        def visit_FunctionDef(self, node):
            add(node.name)  # the name is bound here; the body is another scope

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_ClassDef(self, node):
            add(node.name)

        def visit_Lambda(self, node):
            pass

        def visit_ListComp(self, node):
            # its `for` variables are its own scope, but a `:=` in it binds in the function
            for inner in _walk_scope(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if isinstance(inner, ast.NamedExpr):
                    add(inner.target.id)

        visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

        def visit_MatchAs(self, node):  # `case a:`, `case [x, *rest]:`, `case {**rest}:` capture names
            if node.name is not None:
                add(node.name)
            self.generic_visit(node)

        def visit_MatchStar(self, node):
            if node.name is not None:
                add(node.name)

        def visit_MatchMapping(self, node):
            if node.rest is not None:
                add(node.rest)
            self.generic_visit(node)

        def visit_Import(self, node):
            for alias in node.names:
                add((alias.asname or alias.name).split(".")[0])

        visit_ImportFrom = visit_Import

        def visit_Global(self, node):
            pass

        def visit_For(self, node):
            if not getattr(node, "egad_item", None):  # a generated item exists only inside the loop's body
                self.visit(node.target)
            for child in (node.iter, *node.body, *node.orelse):
                self.visit(child)

    for statement in statements:
        Visitor().visit(statement)
    return [n for n in names if not n.startswith("__egad")] + [n for n in names if n.startswith("__egad")]


def _unconvertible(statements) -> tuple[tuple[str, int], ...]:
    """(construct, line) of each construct in a block that cannot run under a traced condition."""
    found = []

    class Visitor(ast.NodeVisitor):
        def visit_Try(self, node):
            found.append(("try", node.lineno))
            self.generic_visit(node)

        visit_TryStar = visit_Try

        def visit_Global(self, node):
            found.append(("global", node.lineno))

        def visit_Nonlocal(self, node):
            found.append(("nonlocal", node.lineno))

        def visit_Delete(self, node):  # a name deleted on one path only has no value to carry
            found.append(("del", node.lineno))

        def visit_Yield(self, node):
            found.append(("yield", node.lineno))

        visit_YieldFrom = visit_Yield

        def visit_FunctionDef(self, node):
            pass

        visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    for statement in statements:
        Visitor().visit(statement)
    return tuple(found)


def _contains(statements, kinds, stop_at=(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) -> bool:
    for statement in statements:
        for node in _walk_scope(statement, stop_at):
            if isinstance(node, kinds):
                return True
    return False


def _walk_scope(node, stop_at):
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, stop_at):
            continue
        yield from _walk_scope(child, stop_at)


_LOOPS = (ast.While, ast.For, ast.AsyncFor)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPOUND = (ast.If, ast.While, ast.For, ast.With, ast.Try, ast.Match)


def _always_returns(statements) -> bool:
    """Does every path through a block end in `return` or `raise` (a conservative
    answer: False when unsure), so that a function ending with it never falls off its end?"""
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _always_returns(last.body) and _always_returns(last.orelse)
    if isinstance(last, ast.With):
        return _always_returns(last.body)
    if isinstance(last, ast.Try):
        return _always_returns(last.finalbody) or (
            _always_returns(last.orelse or last.body) and all(_always_returns(h.body) for h in last.handlers))
    if isinstance(last, ast.While):  # `while True:` without a break never ends but by return
        return isinstance(last.test, ast.Constant) and bool(last.test.value) and not _direct_jumps(last.body, ast.Break)
    if isinstance(last, ast.Match):
        final = last.cases[-1]
        irrefutable = isinstance(final.pattern, ast.MatchAs) and final.pattern.pattern is None and final.guard is None
        return irrefutable and all(_always_returns(case.body) for case in last.cases)
    return False


def _direct_jumps(body, kind) -> bool:
    """Does the loop body contain `kind` (Break/Continue) for this loop (not a nested one)?"""
    return _contains(body, kind, stop_at=(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, *_LOOPS))


# --- node helpers ---------------------------------------------------------------------

def _name(id_, store=False):
    return ast.Name(id_, ast.Store() if store else ast.Load())


def _assign(target: str, value):
    return ast.Assign(targets=[_name(target, store=True)], value=value)


def _runtime(attr: str):
    return ast.Attribute(_name(RUNTIME), attr, ast.Load())


def _call(attr: str, *args):
    return ast.Call(_runtime(attr), list(args), [])


def _thunk(expression):
    return ast.Lambda(ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), expression)


def _tuple(names, store=False):
    return ast.Tuple([_name(n, store) for n in names], ast.Store() if store else ast.Load())


def _strings(values):
    return ast.Tuple([ast.Constant(v) for v in values], ast.Load())


def _def(name, params, body, like):
    node = ast.FunctionDef(
        name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], kwonlyargs=[],
                                      kw_defaults=[], defaults=[]),
        body=body or [ast.Pass()], decorator_list=[], returns=None, **_FUNCTION_EXTRA)
    return ast.copy_location(node, like)


def _located(nodes, like):
    """Give generated statements the first line of the statement they replace (a
    single line: Python reports a multi-line call at its last line)."""
    for node in nodes:
        ast.copy_location(node, like)
        node.end_lineno, node.end_col_offset = node.lineno, node.col_offset
        ast.fix_missing_locations(node)
    return nodes


# --- pass 1: jumps to flags --------------------------------------------------------------

def _guard(test, body):
    """`if test: body`, marked as a guard that skips code after a jump."""
    node = ast.If(test=test, body=body, orelse=[])
    node.egad_guard = True
    return node


class _Flags:
    def __init__(self, function_id: int):
        self.returned = f"__egad_returned_{function_id}"
        self.retval = f"{RETURN_VALUE_PREFIX}{function_id}"


class _JumpRewriter:
    """Rewrite break/continue/return inside control flow as flags + guards."""

    def __init__(self, flags: _Flags, uses_return_flag: bool, filename: str, function: str):
        self.flags = flags
        self.uses_return_flag = uses_return_flag
        self.filename, self.function = filename, function

    def block(self, statements, loop) -> tuple[list, set]:
        """(rewritten statements, flags that may be set by them). `loop` is
        (break_flag, continue_flag) of the innermost enclosing loop, or None."""
        out, sets = [], set()
        for index, statement in enumerate(statements):
            rewritten, statement_sets = self.statement(statement, loop)
            out.extend(rewritten)
            sets |= statement_sets
            stopping = sorted(f for f in statement_sets if f)
            rest = statements[index + 1:]
            if stopping and rest:
                rest_out, rest_sets = self.block(rest, loop)
                sets |= rest_sets
                guard = _guard(self._none_set(stopping), rest_out)
                out.extend(_located([guard], rest[0]))
                break
        return out, sets

    def _none_set(self, flags):
        test = _name(flags[0])
        for flag in flags[1:]:
            test = ast.BoolOp(ast.Or(), [test, _name(flag)])
        return ast.UnaryOp(ast.Not(), test)

    def statement(self, node, loop):
        if isinstance(node, ast.Return) and self.uses_return_flag:
            value = node.value if node.value is not None else ast.Constant(None)
            return _located([_assign(self.flags.retval, value), _assign(self.flags.returned, ast.Constant(True))],
                            node), {self.flags.returned}
        if isinstance(node, ast.Break):
            return _located([_assign(loop[0], ast.Constant(True))], node), {loop[0]}
        if isinstance(node, ast.Continue):
            return _located([_assign(loop[1], ast.Constant(True))], node), {loop[1]}
        if isinstance(node, ast.If):
            body, s1 = self.block(node.body, loop)
            orelse, s2 = self.block(node.orelse, loop)
            node.body, node.orelse = body or [ast.Pass()], orelse
            return [node], s1 | s2
        if isinstance(node, (ast.With, ast.Try, ast.Match)):
            sets = set()
            for case in getattr(node, "cases", []):
                rewritten, case_sets = self.block(case.body, loop)
                case.body = rewritten or [ast.Pass()]
                sets |= case_sets
            for field in ("body", "orelse", "finalbody"):
                if hasattr(node, field):
                    rewritten, field_sets = self.block(getattr(node, field), loop)
                    setattr(node, field, rewritten or ([ast.Pass()] if field == "body" else []))
                    sets |= field_sets
            for handler in getattr(node, "handlers", []):
                handler.body, handler_sets = self.block(handler.body, loop)
                sets |= handler_sets
            return [node], sets
        if isinstance(node, _LOOPS):
            return self._loop(node)
        return [node], set()

    def _loop(self, node):
        if node.orelse:
            raise UnsupportedError(message(f"`{'while' if isinstance(node, ast.While) else 'for'} ... else` "
                                           "is not supported by egad.function",
                                           where=SourceLoc(self.filename, node.lineno, self.function).long(),
                                           instead="use a flag variable set before break"))
        loop_id = next(_counter)
        has_break = _direct_jumps(node.body, ast.Break)
        has_continue = _direct_jumps(node.body, ast.Continue)
        break_flag = f"__egad_break_{loop_id}" if has_break else None
        continue_flag = f"__egad_continue_{loop_id}" if has_continue else None
        body, sets = self.block(node.body, (break_flag, continue_flag))
        sets.discard(break_flag)
        sets.discard(continue_flag)
        sets.discard(None)
        stops = [f for f in (break_flag, self.flags.returned if self.uses_return_flag and self.flags.returned in sets
                             else None) if f]
        prefix = [_assign(continue_flag, ast.Constant(False))] if continue_flag else []
        before = [_assign(break_flag, ast.Constant(False))] if break_flag else []
        if isinstance(node, ast.While):
            if stops:
                node.test = ast.BoolOp(ast.And(), [self._none_set(stops), node.test])
            node.body = _located(prefix, node) + (body or [ast.Pass()])
        elif stops:
            # After a break (or return) Python leaves the target at the element it stopped on:
            # the assignment of the target is skipped with the rest of the body.
            item = f"__egad_item_{loop_id}"
            unpack = _located([ast.Assign([node.target], _name(item))], node)
            node.target = _name(item, store=True)
            node.egad_item = item
            node.body = _located(prefix, node) + _located([_guard(self._none_set(stops), unpack + body)], node)
        else:
            node.body = _located(prefix, node) + body
        return _located(before, node) + [node], sets


# --- pass 2: functionalize ---------------------------------------------------------------

class _FunctionConverter:
    def __init__(self, filename: str):
        self.filename = filename
        self.outer_scope: dict[str, type] = {}  # names declared global/nonlocal -> ast.Global/ast.Nonlocal
        # Variables that nested functions (defs, lambdas) may read: the generated functions
        # share them with the converted function (`nonlocal`) instead of taking them as
        # parameters, so that a closure called inside a branch or loop sees their current value.
        self.closure_names: set[str] = set()
        # Nested defs that write a `global`/`nonlocal` variable: a call to one under a traced
        # condition would apply its write on every path (it runs once, when traced).
        self.outer_writers: set[str] = set()

    def convert_function(self, node):
        """Rewrite a FunctionDef in place."""
        function_id = next(_counter)
        flags = _Flags(function_id)
        nested_return = any(_contains([s], ast.Return) for s in node.body if isinstance(s, _COMPOUND))
        ends_in_return = _always_returns(node.body)  # read before the jump pass rewrites the returns
        early_return_line = min((r.lineno for s in node.body if isinstance(s, _COMPOUND)
                                 for r in _walk_scope(s, _SCOPES) if isinstance(r, ast.Return)), default=node.lineno)
        rewriter = _JumpRewriter(flags, nested_return, self.filename, node.name)
        body, _ = rewriter.block(node.body, None)
        if nested_return:
            body = _located([_assign(flags.returned, ast.Constant(False)),
                             _assign(flags.retval, _call("Undefined", ast.Constant("return value")))], node) + body
            result = _name(flags.retval)
            if not ends_in_return:  # Python returns None where no `return` ran
                end = ast.Tuple([ast.Constant(c) for c in (node.name, self.filename, early_return_line,
                                                           node.end_lineno or node.body[-1].lineno)], ast.Load())
                result = _call("result_or_none", _name(flags.returned), result, end)
            body.append(ast.copy_location(ast.Return(result), node.body[-1]))
        params = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
        params |= {a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None}
        for statement in body:
            self.outer_scope.update(_declared_outer(statement))
        local_names = [n for n in assigned_names(body) if n not in params and n not in self.outer_scope]
        self.closure_names = _closure_reads(node.body) & (params | set(local_names))
        self.outer_writers = {inner.name for statement in node.body for inner in ast.walk(statement)
                              if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)) and _writes_outer(inner)}
        prologue = _located([_assign(n, _call("Undefined", ast.Constant(n))) for n in local_names], node)
        node.body = prologue + self.block(body)

    def block(self, statements) -> list:
        out = []
        for statement in statements:
            out.extend(self.statement(statement))
        return out

    def statement(self, node) -> list:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _FunctionConverter(self.filename).convert_function(node)
            return [node]
        if isinstance(node, ast.If):
            return self._if(node)
        if isinstance(node, ast.While):
            return self._while(node)
        if isinstance(node, ast.For):
            return self._for(node)
        if isinstance(node, ast.Assert):
            message_thunk = _thunk(node.msg) if node.msg is not None else ast.Constant(None)
            call = ast.Expr(_call("assert_", _thunk(_Expressions(self.filename).visit(node.test)), message_thunk))
            return _located([call], node)
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, field, None), list):
                setattr(node, field, self.block(getattr(node, field)))
        for handler in getattr(node, "handlers", []):
            handler.body = self.block(handler.body)
        for case in getattr(node, "cases", []):
            case.body = self.block(case.body)
        return [_Expressions(self.filename).visit(node)]

    def _generated(self, name, params, body, like):
        """A generated function of the statement's variables. Those that closures read are
        the converted function's own variables, set from the parameters on entry."""
        shared = [p for p in params if p in self.closure_names]
        if shared:
            params = [f"__egad_shared_{p}" if p in shared else p for p in params]
            body = _located([ast.Nonlocal(shared)] + [_assign(p, _name(f"__egad_shared_{p}")) for p in shared],
                            like) + body
        return _def(name, params, body, like)

    def _local(self, names):
        """The assigned names that are this function's locals (state of the statement)."""
        return [n for n in names if n not in self.outer_scope]

    def _outer_writes(self, statements) -> tuple[tuple[str, int], ...]:
        """(\"global write\", line) of each assignment to a global/nonlocal name in a block."""
        writes = []
        for statement in statements:
            for node in _walk_scope(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in self.outer_scope:
                    writes.append(("global write", node.lineno))
        return tuple(writes)

    def _writer_calls(self, statements) -> tuple[tuple[str, int], ...]:
        """("outer write call", line) of each call, by name, of a nested def that writes a
        global/nonlocal variable (calls through other names or functions are not seen)."""
        return tuple(("outer write call", node.lineno) for statement in statements
                     for node in _walk_scope(statement, _SCOPES)
                     if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                     and node.func.id in self.outer_writers)

    def _redeclare(self, statements):
        """`global x` / `nonlocal x` for outer names a generated function assigns, so
        they keep meaning the outer variable (as in the user's code)."""
        outer = [n for n in assigned_names(statements) if n in self.outer_scope]
        return [self.outer_scope[n]([n]) for n in outer]

    def _info(self, node, kind, then_assigns=(), else_assigns=(), blocks=(), guard=False):
        statements = [s for block in blocks for s in block]
        unconvertible = _unconvertible(statements) + self._outer_writes(statements) + self._writer_calls(statements)
        keywords = [ast.keyword("file", ast.Constant(self.filename)), ast.keyword("line", ast.Constant(node.lineno)),
                    ast.keyword("kind", ast.Constant(kind)),
                    ast.keyword("unconvertible", ast.Tuple([_strings(c) for c in unconvertible], ast.Load())),
                    ast.keyword("then_assigns", _strings(then_assigns)),
                    ast.keyword("else_assigns", _strings(else_assigns)), ast.keyword("guard", ast.Constant(guard))]
        return ast.Call(_runtime("StatementInfo"), [], keywords)

    def _if(self, node):
        statement_id = next(_counter)
        then_names, else_names = self._local(assigned_names(node.body)), self._local(assigned_names(node.orelse))
        names = then_names + [n for n in else_names if n not in then_names]
        test = _Expressions(self.filename).visit(node.test)
        then_body = self._redeclare(node.body) + self.block(node.body) + [ast.Return(_tuple(names))]
        else_body = self._redeclare(node.orelse) + self.block(node.orelse) + [ast.Return(_tuple(names))]
        then_fn = self._generated(f"__egad_then_{statement_id}", names, then_body, node)
        else_fn = self._generated(f"__egad_else_{statement_id}", names, else_body, node)
        call = _call("if_stmt", test, _name(then_fn.name), _name(else_fn.name), _tuple(names), _strings(names),
                     self._info(node, "if", then_names, else_names, [node.body, node.orelse],
                                guard=getattr(node, "egad_guard", False)))
        result = ast.Assign([_tuple(names, store=True)], call) if names else ast.Expr(call)
        return _located([then_fn, else_fn, result], node)

    def _while(self, node):
        if _bound_names(node.test):
            # `while (s := f(x)) < t:` binds s in the function; a separate condition function
            # would lose it. The test runs before the loop and again at the end of each trip.
            # The copy is taken first: converting the test rewrites its nodes in place, and a
            # half-converted copy would bind the generated names in the body (UnboundLocalError).
            test = f"__egad_test_{next(_counter)}"
            again = copy.deepcopy(node.test)
            before = self.statement(_located([_assign(test, node.test)], node)[0])
            node.body = node.body + _located([_assign(test, again)], node)
            node.test = _name(test)
            return before + self._while(node)
        statement_id = next(_counter)
        names = self._local(assigned_names(node.body))
        cond_fn = self._generated(f"__egad_cond_{statement_id}", names,
                                  [ast.Return(_Expressions(self.filename).visit(node.test))], node)
        body = self._redeclare(node.body) + self.block(node.body) + [ast.Return(_tuple(names))]
        body_fn = self._generated(f"__egad_body_{statement_id}", names, body, node)
        call = _call("while_stmt", _name(cond_fn.name), _name(body_fn.name), _tuple(names), _strings(names),
                     self._info(node, "while", blocks=[node.body]))
        result = ast.Assign([_tuple(names, store=True)], call) if names else ast.Expr(call)
        return _located([cond_fn, body_fn, result], node)

    def _for(self, node):
        statement_id = next(_counter)
        item = getattr(node, "egad_item", None)
        if item is not None:  # the jump pass already assigns the target inside the body, under a guard
            unpack = []
        else:
            item = f"__egad_item_{statement_id}"
            unpack = [ast.Assign([node.target], _name(item))]
        target_names = self._local(assigned_names(unpack))
        names = target_names + [n for n in self._local(assigned_names(node.body)) if n not in target_names]
        body_fn = self._generated(f"__egad_body_{statement_id}", [item, *names],
                                  self._redeclare([*unpack, *node.body]) + _located(unpack, node)
                                  + self.block(node.body) + [ast.Return(_tuple(names))], node)
        iterable = _loop_iterable(_Expressions(self.filename).visit(node.iter))
        call = _call("for_stmt", iterable, _name(body_fn.name), _tuple(names), _strings(names),
                     self._info(node, "for", blocks=[node.body]))
        result = ast.Assign([_tuple(names, store=True)], call) if names else ast.Expr(call)
        return _located([body_fn, result], node)


def _loop_iterable(node):
    """A `for` iterable with `range(...)` (here and in the arguments of `enumerate`/`zip`)
    routed to `range_`, and `enumerate(...)`/`zip(...)` to `iterate_`, which receives the
    callee itself: a traced loop when it is the builtin and an argument is traced, else
    the call as written (so a user's own `zip` stays theirs)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)) \
            or any(isinstance(arg, ast.Starred) for arg in node.args):
        return node
    if node.func.id == "range" and not node.keywords:
        return _call("range_", *node.args)
    if node.func.id in ("enumerate", "zip") and all(keyword.arg is not None for keyword in node.keywords):
        return ast.Call(_runtime("iterate_"), [node.func, *map(_loop_iterable, node.args)], node.keywords)
    return node


def _closure_reads(statements) -> set[str]:
    """Every name used inside the nested functions (defs, lambdas) of a block: a superset
    of the block's variables those functions read from their enclosing scope."""
    names = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Name):
                        names.add(inner.id)
                    elif isinstance(inner, ast.Nonlocal):
                        names.update(inner.names)
    return names


def _writes_outer(function) -> bool:
    """Does a def assign a variable it declares `global` or `nonlocal`?"""
    declared = {name for statement in function.body for name in _declared_outer(statement)}
    return any(isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in declared
               for statement in function.body for node in _walk_scope(statement, _SCOPES))


def _declared_outer(statement) -> dict[str, type]:
    """Names a function declares `global` or `nonlocal`, with the kind of declaration."""
    names = {}
    for node in _walk_scope(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update({name: type(node) for name in node.names})
    return names


class _Expressions(ast.NodeTransformer):
    """`and`/`or`/`not`, chained comparisons and `x if c else y` on traced values.

    The operands Python may skip run in lambdas (thunks). A `:=` inside one would bind
    the lambda's variable, so such a thunk takes the bound variables' values as
    parameters and returns their new values; the runtime helper hands them back and
    the expression assigns them (`(r := helper(...), s := r[1][0], r[0])[-1]`)."""

    def __init__(self, filename: str = "<unknown>"):
        self.filename = filename

    def visit_FunctionDef(self, node):
        return node  # converted separately, as its own scope

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def _lazy(self, expressions, node, helper, *leading):
        """`helper(*leading, *thunks of expressions)`, carrying the names they bind with `:=`."""
        bound = []
        for expression in expressions:
            bound += [n for n in _bound_names(expression) if n not in bound]
        params = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in bound], kwonlyargs=[], kw_defaults=[],
                               defaults=[])
        if not bound:
            return ast.copy_location(_call(helper, *leading, *[ast.Lambda(params, e) for e in expressions]), node)
        thunks = [ast.Lambda(params, ast.Tuple([e, _tuple(bound)], ast.Load())) for e in expressions]
        info = ast.Tuple([_strings(bound), _tuple(bound), ast.Constant(self.filename), ast.Constant(node.lineno)],
                         ast.Load())
        result = f"__egad_bound_{next(_counter)}"
        call = ast.NamedExpr(_name(result, store=True), _call(helper, *leading, *thunks, info))
        write_back = [ast.NamedExpr(_name(n, store=True),
                                    ast.Subscript(ast.Subscript(_name(result), ast.Constant(1), ast.Load()),
                                                  ast.Constant(k), ast.Load())) for k, n in enumerate(bound)]
        value = ast.Subscript(_name(result), ast.Constant(0), ast.Load())
        whole = ast.Subscript(ast.Tuple([call, *write_back, value], ast.Load()), ast.Constant(-1), ast.Load())
        return ast.copy_location(whole, node)

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        helper = "and_" if isinstance(node.op, ast.And) else "or_"
        result = node.values[-1]
        for value in reversed(node.values[:-1]):  # the first operand always runs: it is passed as a value
            result = self._lazy([result], node, helper, value)
        return ast.copy_location(result, node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call("not_", node.operand), node)
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return self._lazy([node.body, node.orelse], node, "if_exp", node.test)

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        # a < b < c evaluates b once, and c only when a < b holds.
        if not any(_bound_names(operand) for operand in node.comparators):
            # compare_chain(a, ("Lt", "Lt"), lambda: b, lambda: c): no name to bind, so it runs
            # anywhere, a comprehension's iterable included (where `:=` is a SyntaxError)
            ops = _strings([type(op).__name__ for op in node.ops])
            return ast.copy_location(_call("compare_chain", node.left, ops, *map(_thunk, node.comparators)), node)
        # An operand binds a name with `:=`, so thunks cannot hold it:
        # (a < (m := b)) and (m < c), with `and` carrying the names c binds (see _lazy).
        lefts, rights = [node.left], []
        for middle in node.comparators[:-1]:
            temporary = f"__egad_middle_{next(_counter)}"
            rights.append(ast.copy_location(ast.NamedExpr(_name(temporary, store=True), middle), middle))
            lefts.append(ast.copy_location(_name(temporary), middle))
        rights.append(node.comparators[-1])
        parts = [ast.copy_location(ast.Compare(left, [op], [right]), node)
                 for left, op, right in zip(lefts, node.ops, rights)]
        result = parts[-1]
        for part in reversed(parts[:-1]):
            result = self._lazy([result], node, "and_", part)
        return ast.copy_location(result, node)


def _bound_names(expression) -> list[str]:
    """The user's variables that `:=` in an expression binds in the expression's scope."""
    names = []
    for node in _walk_scope(expression, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        if isinstance(node, ast.NamedExpr) and not node.target.id.startswith("__egad") and node.target.id not in names:
            names.append(node.target.id)
    return names
