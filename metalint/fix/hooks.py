"""Hook policy of :class:`metalint.fix.codemod.ClassEdit`: which hook takes moved code
(:class:`HookChoice`) and where ``__init__`` calls it (:class:`HookPlacement`)."""

from __future__ import annotations

import libcst as cst

from metalint.fix.edits import OWN_RESET, Unfixable, does_nothing, stmt
from metalint.fix.flow import bare_self_call, uses
from metalint.fix.locate import Locating
from metalint.static.draws import Draws, draws
from metalint.static.model import construction
from metalint.static.names import dotted
from metalint.static.syntax import walk_code
from metalint.vocabulary import (
    BUFFER_CLASSES,
    BUFFER_HOOK,
    PARAMETER_CLASSES,
    PARAMETER_CONTAINERS,
    REGISTER_METHODS,
    RESET_HOOK,
    ROOT_ENTRIES,
    TORCH_WITHOUT_RESET,
    WHOLE_MODULE_METHODS,
)


class HookChoice(Locating):
    """Which hook takes the moved code, and whether it can (part of
    :class:`metalint.fix.codemod.ClassEdit`)."""

    hook_prepend: dict[str, list[cst.BaseStatement]]
    hook_call_added: set[str]
    replace: dict
    torch_base: str | None

    def hook_calls(self, hook: str) -> tuple[list[int], bool]:
        """Top-level statements of ``__init__`` that are ``self.<hook>()``; any nested call?"""
        tops, nested = self.facts.self_calls
        return list(tops.get(hook, ())), hook in nested

    def _stays_between(self, s: cst.BaseStatement, reads: set[str], inits: set[str]) -> bool:
        """May statement ``s`` stay between moved code and the call of the hook it joins
        (:meth:`join_called_hook`): a simple statement that draws nothing, calls no method,
        reads no tensor (``.weight``, ``.bias``, ``.data``), touches none of ``inits`` and
        writes none of ``reads``?"""
        written, read, methods = uses(s, self.memo())
        return not (
            not isinstance(s, cst.SimpleStatementLine)
            or draws(s, self.ctx) is not Draws.NEVER
            or methods
            or written & reads
            or (written | read) & inits
            or any(
                isinstance(n, cst.Attribute) and n.attr.value in ("weight", "bias", "data")
                for n in walk_code(s)
            )
        )

    def choose_hook(self, index: int, prefer: tuple[str, ...] = ()) -> str:
        """``reset_parameters`` when the class has one (the private method a hook extending a
        base's calls, when it has that); else an existing public hook that
        ``__init__`` already calls after statement ``index`` (``init_weights``: extending it
        keeps every tensor in one hook); else a new ``reset_parameters``."""
        for hook in (*prefer, OWN_RESET, RESET_HOOK):
            if hook in self.cls.methods:
                return hook
        for hook in (ROOT_ENTRIES[0], BUFFER_HOOK):
            if hook in self.cls.methods and hook in self.ctx.hooks:
                calls, nested = self.hook_calls(hook)
                if calls and not nested and all(c > index for c in calls):
                    return hook
        return RESET_HOOK

    def check_bases(self, hook: str) -> None:
        """A torch base with its own ``reset_parameters()`` (pypots' ``PeepholeLSTMCell(nn.
        LSTMCell)``, a LoRA ``nn.Linear``): a new hook must extend the base's
        (:meth:`_extending_base`, which :meth:`rewrite` then requires); one the class already
        has, or calls, is refused, as the base's ``__init__`` runs it before this class made
        its tensors."""
        for b in self.cls.bases:
            if b.startswith("torch.nn.") and b not in TORCH_WITHOUT_RESET and hook == RESET_HOOK:
                if hook in self.cls.methods or self.hook_calls(hook)[1]:
                    raise Unfixable(f"the base class `{b}` has its own `reset_parameters()`")
                self.torch_base = b

    def _check_existing_hook(self, hook: str) -> None:
        """Raise :class:`Unfixable` when the class's own ``hook`` cannot take more code."""
        body = self.cls.methods[hook].node.body
        if not isinstance(body, cst.IndentedBlock):
            raise Unfixable(f"`{hook}` is written on one line")
        if self.returns(body):
            raise Unfixable(f"`{hook}` returns early")
        if any(
            len(p.name.value) and p.default is None
            for p in self.cls.methods[hook].node.params.params[1:]
        ):
            raise Unfixable(f"`{hook}` takes required arguments")

    def keeps_value(self, hook: str) -> None:
        """Can a value stay where ``__init__`` makes it, with ``hook`` re-creating it for the
        protocol only? The draw (or constant) stays in ``__init__`` (under ``with
        torch.device("meta")`` it allocates nothing), so eager construction runs exactly as
        before; ``hook`` must then be ``reset_parameters()``, which every protocol runs after
        ``to_empty()``, and ``__init__`` must not call it (it would make the value a second
        time). Raises :class:`Unfixable` otherwise."""
        if hook != RESET_HOOK:
            raise Unfixable(f"the value would be re-created in `{hook}()`, not `{RESET_HOOK}()`")
        calls, nested = self.hook_calls(hook)
        if calls or nested or hook in self.hook_call_added:
            raise Unfixable(
                f"`__init__` calls `{hook}()`: a value kept in `__init__` would be made twice"
            )
        through = self.calls_through(hook)
        if through:
            raise Unfixable(
                f"`__init__` calls `{hook}()` through `{through[0]}()`: a value kept in "
                "`__init__` would be made twice"
            )

    def calls_through(self, hook: str) -> tuple[str, int | None] | None:
        """The method of the class that ``__init__`` calls and that calls ``self.<hook>()``,
        itself or through others of the class (an ``init_weights()`` that starts with
        ``self.reset_parameters()``, as ML010's fix writes it), with the index of the
        top-level statement that is its call (None: called inside a statement); or None."""
        tops, nested = self.facts.self_calls
        for first in sorted({*tops, *nested} - {hook}):
            seen: set[str] = set()
            todo = [first]
            while todo:
                name = todo.pop()
                method = self.cls.methods.get(name)
                if name in seen or method is None:
                    continue
                seen.add(name)
                for n in walk_code(method.node.body):
                    if type(n) is cst.Call and (d := dotted(n.func) or "").startswith("self."):
                        if d[5:] == hook:
                            at = tops.get(first, [])
                            return first, (at[0] if len(at) == 1 and first not in nested else None)
                        todo.append(d[5:])
        return None

    def _own_reset(self, hook: str) -> str:
        """The private method that the class's ``reset_parameters()`` (extending a base's)
        calls, when ``hook`` is that hook: new code goes there, guarded as it is."""
        return OWN_RESET if hook == RESET_HOOK and OWN_RESET in self.cls.methods else hook

    def _root_calls_reset(self) -> None:
        """A new ``reset_parameters()`` in a class that already has a root ``init_weights()``
        that construction does not call (timm ``RotAttentionPool2d``: its
        ``init_weights(zero_init_last=False)`` inits the projections, ML001 moves
        ``cls_token``'s zeros into a new ``reset_parameters()``): under timm's protocol a
        module with an ``init_weights()`` is initialised by it alone, so ``init_weights()``
        calls ``reset_parameters()`` first, as the root hooks the fixes make do
        (:func:`metalint.fix.parent_init.own_hook_first`). Eager construction does not run
        ``init_weights()``: nothing changes there."""
        root = ROOT_ENTRIES[0]
        if root not in self.cls.methods or root not in self.ctx.hooks:
            return
        if root in {m.name for m in construction(self.cls)}:
            return  # ``__init__`` calls it: its own edits decide (choose_hook, own_hook_first)
        method = self.cls.methods[root]
        if (
            any(len(p.name.value) and p.default is None for p in method.node.params.params[1:])
            or method.node.params.posonly_params
        ):
            # ``init_weights(self, batch)`` (titans-pytorch's ``NeuralMemory``: it returns the
            # memory's starting weights): no protocol calls it without arguments; not a hook
            return
        if RESET_HOOK in method.self_calls:
            return
        if not isinstance(method.node.body, cst.IndentedBlock) or self.returns(method.node.body):
            raise Unfixable(f"`{root}()` returns early or is written on one line")
        self.hook_prepend.setdefault(root, []).insert(0, stmt(f"self.{RESET_HOOK}()"))

    def join_called_hook(self, hook: str, first: int, last: int, moved: set[int]) -> int:
        """The class already has ``hook()`` (a root ``init_weights()``: the library's, or one an
        earlier fix made) and ``__init__`` calls it once, as a statement, at top-level statement
        ``c``. Code moved from ``first``..``last`` joins it in the order ``__init__`` ran it:
        what ran before the call opens the hook (the caller puts it in :attr:`hook_prepend`;
        the call stays), what ran after ends it (the call moves to where ``last`` was; this
        removes the old call, the caller puts the new one in place of ``last``). The init then
        runs in the same order, provided that nothing that stays between the moved code and
        the call draws random numbers, calls a method, reads a tensor (``.weight``, ``.bias``,
        ``.data``), touches a tensor the moved code initialises or writes what the code that
        now runs later reads. timm HieraDet: ``trunc_normal_(self.pos_embed, ...)`` right
        before the ``if weight_init != 'skip': named_apply(...)`` that ML010's fix made the
        root ``init_weights()``. Returns ``c``. Raises :class:`Unfixable`."""
        by_hand = f"`{self.cls.name}` already has an `{hook}()`: merge this init into it by hand"
        m = self.cls.methods.get(hook)
        if m is None or not isinstance(m.node.body, cst.IndentedBlock) or self.returns(m.node.body):
            raise Unfixable(by_hand)
        if any(p.default is None for p in m.node.params.params[1:]):
            raise Unfixable(by_hand)
        calls, nested = self.hook_calls(hook)
        if nested or len(calls) != 1 or calls[0] in moved or calls[0] in (first, last):
            raise Unfixable(by_hand)
        c = calls[0]
        memo = self.memo()
        # the code that now runs later: the moved code before the call, the hook's own body
        # when the call moves after it
        later = [self.init_body[i] for i in sorted(moved) if i < c]
        if last > c:
            later.append(m.node.body)
        reads = _union(uses(node, memo)[1] for node in later)
        inits = _union(uses(self.init_body[i], memo)[0] for i in moved)
        for i in range(min(first, c) + 1, max(last, c)):
            if i in moved or i == c:
                continue
            if not self._stays_between(self.init_body[i], reads, inits):
                where = "earlier" if c < first else "later"
                raise Unfixable(
                    f"{by_hand} (`__init__` calls it {where}, and code between draws random "
                    "numbers, calls a method or reads a tensor)"
                )
        if last > c:
            old = self.init_body[c]
            self.replace[id(old)] = (old, [])
            self.hook_call_added.add(hook)
        return c


class HookPlacement(HookChoice):
    """Where ``__init__`` calls the hook that takes the moved code (part of
    :class:`metalint.fix.codemod.ClassEdit`)."""

    init_append: list[cst.BaseStatement]
    hook_append: dict[str, list[cst.BaseStatement]]
    unsafe: list[str]
    keep_value: bool

    def use_hook(
        self,
        hook: str,
        after_index: int,
        stmts: list[cst.BaseStatement],
        *,
        random: bool = False,
        call_at: cst.BaseStatement | None = None,
    ) -> None:
        """Put ``stmts`` at the end of ``hook`` (created when missing) and make sure ``__init__``
        calls the hook after statement ``after_index``: at the end of ``__init__``, or where the
        top-level statement ``call_at`` (which this edit replaces) was, when the call is new.
        A class whose ``reset_parameters()`` extends its base's (:meth:`_extending_base`) gets
        its new code in the private method that hook calls, guarded, and ``__init__`` calls."""
        hook = self._own_reset(hook)
        self.check_bases(hook)
        exists = hook in self.cls.methods
        if exists:
            self._check_existing_hook(hook)
        calls, nested = self.hook_calls(hook)
        if nested:
            raise Unfixable(f"`__init__` calls `{hook}()` inside a block")
        calls, via = self._calls_through(hook, exists, after_index, calls)
        if self.keep_value:
            self._keep_in_hook(hook, exists, stmts)
            return
        rets = self._early_hook_calls(hook, after_index, stmts, calls, call_at)
        right_after = False
        if any(c < after_index for c in calls):
            self._call_later(hook, calls, after_index, stmts)
            right_after = True
        elif not calls and hook not in self.hook_call_added:
            right_after = self._add_call(hook, after_index, rets, random=random, call_at=call_at)
        if not exists and hook == RESET_HOOK:
            self._root_calls_reset()
        # the hook's own draws ran after this value eagerly (enformer's ``Attention``:
        # ``rel_pos_bias`` fixed on one pass, ``rel_content_bias`` made before it on the next):
        # the new draw opens the hook, so the draws keep their order
        drawing = not exists or draws(self.cls.methods[hook].node.body, self.ctx) is not Draws.NEVER
        opens = random and exists and drawing and all(c > after_index for c in calls)
        # a call of the hook that draws nothing before the new code (it opens the hook, or the
        # hook draws nothing) moves no draw past another
        later = [
            s
            for j, s in enumerate(self.init_body[after_index + 1 :], after_index + 1)
            # a call through another method runs that method's other code first
            if not ((opens or not drawing) and j in calls and not via)
        ]
        if random and not right_after and not all(draws(s, self.ctx) is Draws.NEVER for s in later):
            self.unsafe.append(_drawn_later(hook, bool(calls)))
        into = self.hook_prepend if opens else self.hook_append
        into.setdefault(hook, []).extend(stmts)

    def _calls_through(
        self, hook: str, exists: bool, after_index: int, calls: list[int]
    ) -> tuple[list[int], bool]:
        """``calls``, or the one call of the method of the class through which ``__init__``
        calls ``hook`` (:meth:`calls_through`), and whether it is that. ``self.init_weights()``
        running ``self.reset_parameters()``: that statement is the hook's call, which must come
        after the value (or a second call would run the hook before the value is there, and
        twice)."""
        through = None if self.keep_value or not exists else self.calls_through(hook)
        if through is None:
            return calls, False
        name, at = through
        if at is None or at < after_index or calls:
            raise Unfixable(
                f"`__init__` calls `{hook}()` through `{name}()`, before this value is made"
                if at is not None and at < after_index
                else f"`__init__` calls `{hook}()` through `{name}()`: merge this by hand"
            )
        return [at], True

    def _add_call(self, hook: str, after_index: int, rets, *, random: bool, call_at) -> bool:
        """Make ``__init__`` call ``hook``, which it does not call yet (see :meth:`use_hook`);
        True when the call comes right after statement ``after_index``."""
        exists = hook in self.cls.methods
        right_after = False
        if exists and not does_nothing(self.cls.methods[hook].node.body):
            self.unsafe.append(
                f"`__init__` now calls the existing `{hook}()`, which re-initialises its other tensors"
            )
        if rets is None and self.returns(self.init.node.body):
            raise Unfixable("`__init__` returns early")
        if rets:
            self._call_on_every_path(hook, rets, exists, after_index, random)
        elif call_at is not None:
            call = stmt(f"self.{hook}()").with_changes(leading_lines=call_at.leading_lines)
            done = self.replace.get(id(call_at), (call_at, []))[1]
            self.replace[id(call_at)] = (call_at, [*done, call])
        elif not exists and self._unsettled_after(after_index, random):
            self._call_after(hook, after_index)
            right_after = True
        else:
            self.init_append.append(stmt(f"self.{hook}()"))
        self.hook_call_added.add(hook)
        return right_after

    def _early_hook_calls(self, hook: str, after_index: int, stmts, calls, call_at):
        """:meth:`early_returns` when ``hook`` can run on every path of an ``__init__`` that
        returns early (vector-quantize-pytorch's ``Codebook``: ``if not affine_param:
        return`` before its affine buffers): ``__init__`` calls it before each early return
        and at its end, so what ``stmts`` set after an early return must be guarded by the
        tensor being there (:meth:`conditional`). None (no simple early returns) or []
        (none). Raises :class:`Unfixable` when the hook would miss a path or set a tensor
        that path never made."""
        rets = self.early_returns()
        if not rets:
            return rets
        why = "`__init__` returns early"
        if call_at is not None:
            raise Unfixable(why)
        if self.after_return(after_index) and not all(
            type(x) is cst.If and x.orelse is None for x in stmts
        ):
            raise Unfixable(f"{why} before the value is made, and the hook would not check it")
        if calls and hook not in self.hook_call_added:
            # an earlier fix called it: at the end, and before each early return
            for i, _ in rets:
                before = self.init_body[i].body.body[:-1]
                if not any(bare_self_call(b) == hook for b in before):
                    raise Unfixable(why)
            if any(c != len(self.init_body) - 1 for c in calls):
                raise Unfixable(why)
        return rets

    def _call_on_every_path(self, hook: str, rets, exists: bool, index: int, random: bool):
        """Call ``hook`` before each early return of ``__init__`` and at its end."""
        if not exists and self._unsettled_after(index, random):
            raise Unfixable("`__init__` returns early")
        for _, line in rets:
            done = self.replace.get(id(line), (line, [line]))[1]
            self.replace[id(line)] = (line, [stmt(f"self.{hook}()"), *done])
        self.init_append.append(stmt(f"self.{hook}()"))

    def _keep_in_hook(self, hook: str, exists: bool, stmts: list[cst.BaseStatement]) -> None:
        """:meth:`use_hook` for a value kept in ``__init__``: no call is added."""
        self.keeps_value(hook)
        if not exists:
            self._root_calls_reset()
        self.hook_append.setdefault(hook, []).extend(stmts)

    def _unsettled_after(self, index: int, random: bool) -> bool:
        """Would a new hook called at the end of ``__init__`` run elsewhere than where the
        value was made? Later top-level code draws random numbers (``random``: the hook's draws
        would come after those) or uses every tensor of the module (``self.load_state_dict``,
        ``self.half()``, also through a method of the class). Then the hook is called right
        after statement ``index`` (:meth:`_call_after`), where ``__init__`` made the value."""
        memo = self.memo()
        later = self.init_body[index + 1 :]
        # later children (``self.proj = nn.Linear(d, d)``, a method building them) may get
        # in-place inits that a later fix moves into this hook, after their draws: the call
        # then belongs at the end, where they are made (draws after draws: that fix says so)
        if random and any(draws(s, self.ctx) is not Draws.NEVER for s in later):
            if not any(self._makes_children(s) for s in later):
                return True
        for s in later:
            for name in uses(s, memo)[2]:
                if name in WHOLE_MODULE_METHODS:
                    return True
                for m in self.cls.reachable(name):
                    if m.name != "__init__" and uses(m.node.body, memo)[2] & WHOLE_MODULE_METHODS:
                        return True
        return False

    def _makes_children(self, s: cst.CSTNode) -> bool:
        """May statement ``s`` make a child module? A ``torch.nn`` class, a class of the file
        that has bases, or a method of ``self`` (other than registering a tensor)."""
        if uses(s, self.memo())[2] - set(REGISTER_METHODS):
            return True
        classes = {c.name: c for c in self.ctx.facts.classes}
        for n in walk_code(s):
            if type(n) is not cst.Call:
                continue
            q = self.ctx.qualify(n.func) or ""
            if (
                q.startswith("torch.nn.")
                and q.rsplit(".", 1)[-1][:1].isupper()
                and q not in PARAMETER_CLASSES | BUFFER_CLASSES | PARAMETER_CONTAINERS
            ):
                return True
            name = n.func.value if type(n.func) is cst.Name else None
            if name in classes and any(b not in ("object", "") for b in classes[name].bases):
                return True
        return False

    def _call_after(self, hook: str, index: int) -> None:
        """Call ``hook`` right after top-level statement ``index`` of ``__init__``."""
        top = self.init_body[index]
        old = self.replace.get(id(top))
        current = old[1] if old else [top]
        self.replace[id(top)] = (top, [*current, stmt(f"self.{hook}()")])
        self.hook_call_added.add(hook)

    def _call_later(self, hook: str, calls: list[int], index: int, stmts) -> None:
        """``__init__`` calls ``hook`` (once, as a statement) before top-level statement
        ``index`` makes the value the hook is now to set (peft's ``MontecloraSampler``: an
        earlier fix called it right after the first parameter, before the sampler draws, and
        the next parameter is made on the next line). The call moves right after ``index``
        when the code between calls no method (registering a tensor aside), touches no tensor
        the hook already sets and, if the hook draws, draws nothing: it then runs as before,
        with the new value in the order ``__init__`` made it. Else it moves to the end of
        ``__init__`` when no code after it calls a method or touches those tensors (unsafe
        when the hook draws and that code draws too: the draws change order). Raises
        :class:`Unfixable`."""
        why = f"`__init__` calls `{hook}()` before the value is created"
        if len(calls) != 1:
            raise Unfixable(why)
        memo = self.memo()
        had = list(self.hook_append.get(hook, []))
        if hook in self.cls.methods:
            had.append(self.cls.methods[hook].node.body)
        attrs: set[str] = set()
        for node in had:
            written, read, _ = uses(node, memo)
            attrs |= written | read
        draws_random = not all(draws(n, self.ctx) is Draws.NEVER for n in [*had, *stmts])
        aside = set(REGISTER_METHODS) | {"add_module", "register_module"}

        def touched(s: cst.CSTNode) -> bool:
            written, read, methods = uses(s, memo)
            return bool((written | read) & attrs or methods - aside)

        c = calls[0]
        old = self.init_body[c]
        between = self.init_body[c + 1 : index]
        if not any(touched(s) for s in between) and not (
            draws_random and not all(draws(s, self.ctx) is Draws.NEVER for s in between)
        ):
            self.replace[id(old)] = (old, [])
            self._call_after(hook, index)
            return
        rest = [s for i, s in enumerate(self.init_body) if i > c and i != index]
        if any(touched(s) for s in rest):
            raise Unfixable(why)
        if draws_random and not all(draws(s, self.ctx) is Draws.NEVER for s in rest):
            self.unsafe.append(
                f"`{hook}()` is now called at the end of `__init__`: its random draws come "
                "after other random draws, so eager values differ under the same seed"
            )
        self.replace[id(old)] = (old, [])
        self.init_append.append(stmt(f"self.{hook}()"))
        self.hook_call_added.add(hook)


def _union(sets) -> set[str]:
    out: set[str] = set()
    for x in sets:
        out |= x
    return out


def _drawn_later(hook: str, called: bool) -> str:
    """Why a random value moved into ``hook`` changes eager values: ``called``, ``__init__``
    already calls the hook after other draws (and a value kept in ``__init__`` would be drawn
    twice: :meth:`ClassEdit.keeps_value`); else the new call comes at its end."""
    if called:
        return (
            f"the random value is now drawn in `{hook}()`, which `__init__` already calls after "
            "other random draws, so eager values differ under the same seed (same distribution)"
        )
    return (
        "the random value is now drawn at the end of `__init__`, after other random draws, "
        "so eager values differ under the same seed (same distribution)"
    )
