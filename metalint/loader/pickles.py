"""A restricted, budgeted pickle reader for the pickles a checkpoint holds.

``pickle.Unpickler`` is no place for a hostile pickle even with ``find_class`` restricted:
a ``LONG_BINPUT`` with a memo index of 2**31 makes the C unpickler allocate (and clear) a
memo array of that size, and every constructor the pickle may call copies its arguments, so
one argument tuple reused through the memo k times costs k copies. :class:`PickleReader`
runs the opcodes itself (parsed by ``pickletools.genops``):

- only the opcodes of protocols 2-5 that build plain values, tuples, lists and dicts, call a
  global (``REDUCE``/``NEWOBJ``), set state (``BUILD``), use the memo (a dict) and name a
  persistent id; anything else (sets, ``INST``/``OBJ``, extension registry, text opcodes) is
  refused;
- every global, call, state and persistent id goes to a method of the subclass; by default
  each is refused, so nothing of the pickle runs unless a subclass builds it itself;
- a budget of work units: one per opcode, and what a subclass's constructor copies
  (:meth:`charge`); over it, the pickle is refused. Memory is at most a small multiple of it;
- dict keys are plain values only (str, int, bytes, float, bool, None) unless the subclass
  allows more (:meth:`key_ok`): hashing a key nested a million tuples deep overflows the C
  stack.

Every refusal is a :class:`PickleRefused` with a one-line message.
"""

from __future__ import annotations

import pickletools

#: work units (opcodes plus copied items) one pickle may cost
MAX_PICKLE_WORK = 5_000_000

#: the dict keys a pickle may use unless a reader allows more
PLAIN_KEYS = (str, int, bytes, float, bool, type(None))
_BATCH = 4096


class PickleRefused(ValueError):
    """A pickle that is malformed, over its budget or asks for what is not allowed."""


class PickleReader:
    """Subclass and override :meth:`find_class`, :meth:`call`, :meth:`new`, :meth:`build`,
    :meth:`persistent_load`, :meth:`append_to`, :meth:`set_items` as needed."""

    def __init__(self, data: bytes, *, max_work: int = MAX_PICKLE_WORK):
        self.data = data
        self.max_work = max_work
        self.work = 0
        self._stack: list = []
        self._marks: list[int] = []
        self._memo: dict = {}

    # -- what a subclass decides ------------------------------------------------------------

    def find_class(self, module: str, name: str):
        raise PickleRefused(f"global {module}.{name} is not allowed")

    def call(self, func, args: tuple):
        raise PickleRefused(f"call of {type(func).__name__} is not allowed")

    def new(self, cls, args: tuple):
        return self.call(cls, args)

    def build(self, obj, state) -> None:
        raise PickleRefused(f"state of {type(obj).__name__} is not allowed")

    def persistent_load(self, pid):
        raise PickleRefused("persistent ids are not allowed")

    def append_to(self, target, items: list) -> None:
        if type(target) is not list:
            raise PickleRefused(f"append to {type(target).__name__}")
        target.extend(items)

    def set_items(self, target, pairs) -> None:
        if type(target) is not dict:
            raise PickleRefused(f"item assignment to {type(target).__name__}")
        for k, v in pairs:
            if not self.key_ok(k):
                raise PickleRefused(f"dict key of type {type(k).__name__}")
            target[k] = v

    def key_ok(self, key) -> bool:
        return type(key) in PLAIN_KEYS

    def charge(self, units: int) -> None:
        self.work += units
        if self.work > self.max_work:
            raise PickleRefused(
                f"pickle needs over {self.max_work} units of work (opcodes and copies); refused"
            )

    # -- the machine -----------------------------------------------------------------------

    def _pop(self):
        marks = self._marks
        if len(self._stack) <= (marks[-1] if marks else 0):
            raise PickleRefused("malformed pickle: stack underflow")
        return self._stack.pop()

    def _top(self):
        marks = self._marks
        if len(self._stack) <= (marks[-1] if marks else 0):
            raise PickleRefused("malformed pickle: stack underflow")
        return self._stack[-1]

    def _pop_mark(self) -> list:
        if not self._marks:
            raise PickleRefused("malformed pickle: no MARK")
        i = self._marks.pop()
        items = self._stack[i:]
        del self._stack[i:]
        return items

    def _pairs(self, items: list):
        if len(items) % 2:
            raise PickleRefused("malformed pickle: odd number of dict items")
        return zip(items[::2], items[1::2])

    def load(self):
        """Run the pickle; the object it builds, or :class:`PickleRefused`."""
        ops = 0  # charged in batches: the budget is overrun by at most _BATCH opcodes
        try:
            for op, arg, _pos in pickletools.genops(self.data):
                ops += 1
                if ops == _BATCH:
                    self.charge(ops)
                    ops = 0
                handler = _BY_OPCODE.get(op)
                if handler is None:
                    raise PickleRefused(f"opcode {op.name} is not allowed")
                if handler is _stop:
                    self.charge(ops)
                    return self._pop()
                handler(self, arg)
        except PickleRefused:
            raise
        except RecursionError:
            raise PickleRefused("malformed pickle: nested too deep") from None
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as e:
            msg = str(e).splitlines()[0][:120] if str(e) else ""
            raise PickleRefused(f"malformed pickle: {type(e).__name__}: {msg}") from None
        raise PickleRefused("malformed pickle: no STOP")


def _push_arg(self: PickleReader, arg) -> None:
    self._stack.append(arg)


def _const(value):
    def handler(self: PickleReader, arg) -> None:
        self._stack.append(value)

    return handler


def _skip(self: PickleReader, arg) -> None:
    pass


def _stop(self: PickleReader, arg) -> None:  # handled in load()
    pass


def _mark(self: PickleReader, arg) -> None:
    self._marks.append(len(self._stack))


def _tuple(self: PickleReader, arg) -> None:
    self._stack.append(tuple(self._pop_mark()))


def _tuple_n(n: int):
    def handler(self: PickleReader, arg) -> None:
        items = [self._pop() for _ in range(n)]
        self._stack.append(tuple(reversed(items)))

    return handler


def _list(self: PickleReader, arg) -> None:
    self._stack.append(self._pop_mark())


def _dict(self: PickleReader, arg) -> None:
    d: dict = {}
    self.set_items(d, self._pairs(self._pop_mark()))
    self._stack.append(d)


def _empty_list(self: PickleReader, arg) -> None:
    self._stack.append([])


def _empty_dict(self: PickleReader, arg) -> None:
    self._stack.append({})


def _global(self: PickleReader, arg) -> None:
    module, _, name = str(arg).partition(" ")
    self._stack.append(self.find_class(module, name))


def _stack_global(self: PickleReader, arg) -> None:
    name = self._pop()
    module = self._pop()
    if type(module) is not str or type(name) is not str:
        raise PickleRefused("malformed pickle: STACK_GLOBAL of non-strings")
    self._stack.append(self.find_class(module, name))


def _reduce(self: PickleReader, arg) -> None:
    args = self._pop()
    func = self._pop()
    if type(args) is not tuple:
        raise PickleRefused("malformed pickle: REDUCE arguments are not a tuple")
    self._stack.append(self.call(func, args))


def _newobj(self: PickleReader, arg) -> None:
    args = self._pop()
    cls = self._pop()
    if type(args) is not tuple:
        raise PickleRefused("malformed pickle: NEWOBJ arguments are not a tuple")
    self._stack.append(self.new(cls, args))


def _build(self: PickleReader, arg) -> None:
    state = self._pop()
    self.build(self._top(), state)


def _binpersid(self: PickleReader, arg) -> None:
    self._stack.append(self.persistent_load(self._pop()))


def _append(self: PickleReader, arg) -> None:
    value = self._pop()
    self.append_to(self._top(), [value])


def _appends(self: PickleReader, arg) -> None:
    items = self._pop_mark()
    self.append_to(self._top(), items)


def _setitem(self: PickleReader, arg) -> None:
    value = self._pop()
    key = self._pop()
    self.set_items(self._top(), [(key, value)])


def _setitems(self: PickleReader, arg) -> None:
    items = self._pop_mark()
    self.set_items(self._top(), self._pairs(items))


def _put(self: PickleReader, arg) -> None:
    self._memo[arg] = self._top()


def _memoize(self: PickleReader, arg) -> None:
    self._memo[len(self._memo)] = self._top()


def _get(self: PickleReader, arg) -> None:
    if arg not in self._memo:
        raise PickleRefused(f"malformed pickle: memo entry {arg} is not set")
    self._stack.append(self._memo[arg])


def _pop(self: PickleReader, arg) -> None:
    if self._marks and len(self._stack) == self._marks[-1]:
        self._marks.pop()  # POP right after a MARK discards the mark
    else:
        self._pop()


def _pop_mark(self: PickleReader, arg) -> None:
    self._pop_mark()


def _dup(self: PickleReader, arg) -> None:
    self._stack.append(self._top())


_HANDLERS = {
    "PROTO": _skip,
    "FRAME": _skip,
    "STOP": _stop,
    "MARK": _mark,
    "POP": _pop,
    "POP_MARK": _pop_mark,
    "DUP": _dup,
    "NONE": _const(None),
    "NEWTRUE": _const(True),
    "NEWFALSE": _const(False),
    "EMPTY_TUPLE": _const(()),
    "EMPTY_LIST": _empty_list,
    "EMPTY_DICT": _empty_dict,
    "TUPLE": _tuple,
    "TUPLE1": _tuple_n(1),
    "TUPLE2": _tuple_n(2),
    "TUPLE3": _tuple_n(3),
    "LIST": _list,
    "DICT": _dict,
    "BININT": _push_arg,
    "BININT1": _push_arg,
    "BININT2": _push_arg,
    "LONG1": _push_arg,
    "LONG4": _push_arg,
    "BINFLOAT": _push_arg,
    "BINUNICODE": _push_arg,
    "SHORT_BINUNICODE": _push_arg,
    "BINUNICODE8": _push_arg,
    "BINBYTES": _push_arg,
    "SHORT_BINBYTES": _push_arg,
    "BINBYTES8": _push_arg,
    "GLOBAL": _global,
    "STACK_GLOBAL": _stack_global,
    "REDUCE": _reduce,
    "NEWOBJ": _newobj,
    "BUILD": _build,
    "BINPERSID": _binpersid,
    "APPEND": _append,
    "APPENDS": _appends,
    "SETITEM": _setitem,
    "SETITEMS": _setitems,
    "BINPUT": _put,
    "LONG_BINPUT": _put,
    "MEMOIZE": _memoize,
    "BINGET": _get,
    "LONG_BINGET": _get,
}
_BY_OPCODE = {op: _HANDLERS[op.name] for op in pickletools.opcodes if op.name in _HANDLERS}
