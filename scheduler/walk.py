"""The graph walk: what to do with one value, its derived values and its dependents.

The same walk serves planning (every operation assumed to succeed; southbound calls collected
as effects; graph changes journaled) and, after a failed effect, execution (calls made, or
replayed when already made; failures handled): only the :class:`~scheduler.effects.Effects`
object it is given differs. Its cost is proportional to the values it
touches.
"""

from __future__ import annotations

from scheduler.api import (
    ConflictError,
    Dependency,
    Descriptor,
    InvalidValueError,
    Key,
    Metadata,
    TxnOperation,
    Value,
    ValueOrigin,
    ValueState,
)
from scheduler.compare import first
from scheduler.context import WalkContext
from scheduler.effects import Effects, keeps_metadata
from scheduler.graph import DerivedPairs, Graph, Node
from scheduler.readiness import is_ready, missing_labels
from scheduler.records import RecordedOp
from scheduler.registry import Registry
from scheduler.transitions import Event, settle_node

CREATE = TxnOperation.CREATE
UPDATE = TxnOperation.UPDATE
DELETE = TxnOperation.DELETE
NB = ValueOrigin.FROM_NB
SB = ValueOrigin.FROM_SB

_NO_METADATA = object()
MAX_DERIVATION_DEPTH = 16


class DerivedKeyError(ValueError):
    """NB tried to set a key that is a derived value (derived values follow their base)."""


class DescriptorOutputError(ValueError):
    """A descriptor's dependencies/derived_values callback raised or returned malformed data."""


class Walker:
    """Applies values to the graph for one transaction (see the module docstring)."""

    def __init__(
        self, graph: Graph, registry: Registry, ctx: WalkContext, effects: Effects
    ) -> None:
        self.graph = graph
        self.registry = registry
        self.ctx = ctx
        self.effects = effects  # planning or execution: the walk is the same
        self._branch: set[Key] = set()

    # -- entry points ----------------------------------------------------------------------

    def apply_nb(self, key: Key, value: Value) -> None:
        """Apply one value of an NB transaction (``None`` deletes)."""
        node = self.graph.get(key)
        if node is not None and node.derived_from is not None:
            self._reject(key, DerivedKeyError(f"{key!r} is a derived value; set its base value"))
            return
        if value is None and node is not None and node.origin is SB:
            # NB never configured this value: it is owned by the SB and stays (documented).
            return
        if node is not None:
            self._set_nb(node, value)
        self._apply(key, value, NB)

    def apply_sb(self, key: Key, value: Value, metadata: Metadata) -> None:
        """Apply one SB notification: no CRUD call, only derived values and dependents follow."""
        self._apply(key, value, SB, metadata=metadata)

    def apply_retry(self, key: Key) -> None:
        """Re-apply the last NB value of base key ``key`` (retry transaction)."""
        node = self.graph.get(key)
        if node is None:
            return
        self.graph.touch(node)
        node.retry_attempt = self.ctx.retry_attempt
        self._apply(key, node.nb_value, NB)

    def settle_failures(self) -> None:
        """After failures, remove (and re-pend) values left in place without their dependencies.

        Without failures a walk keeps "available => dependencies available". A failure can
        break it where the walk could not look back: a value up the recursion (e.g. a member
        of a dependency cycle created as a unit, or a value whose post-create dependents
        removed its own dependency) or a base put back by an aborted delete.
        """
        if not self.ctx.failed:
            return
        graph = self.graph
        for _ in range(len(self.ctx.touched) + 1):  # each round settles at least one value
            broken = [
                key
                for key in sorted(self.ctx.touched)
                if (node := graph.get(key)) is not None
                and node.available
                and node.origin is NB
                and node.deps
                and key not in self.ctx.failed
                and not is_ready(graph, node)
            ]
            if not broken:
                return
            for key in broken:
                self._apply(key, None, NB, dep_update=True)

    def refresh_dependents(self, key: Key) -> None:
        """Re-check values depending on ``key`` after its availability changed outside a walk."""
        self._dep_updates(key)

    # -- dispatch --------------------------------------------------------------------------

    def _apply(
        self,
        key: Key,
        value: Value,
        origin: ValueOrigin,
        *,
        derived_from: Key | None = None,
        dep_update: bool = False,
        metadata: Metadata = _NO_METADATA,
    ) -> bool:
        if key in self._branch:
            return True  # cycle guard: the value is already being processed up the stack
        if key in self.ctx.failed and not self.ctx.reverting:
            # Failed earlier in this transaction: no second southbound call for it (a delete
            # that only forgets an absent value is fine).
            if dep_update:
                return True
            existing = self.graph.get(key)
            if value is not None or (
                existing is not None and (existing.available or _still_in_sb(existing))
            ):
                return False
        self._branch.add(key)
        try:
            node = self.graph.get(key)
            if dep_update:
                if node is None or node.origin is not NB:
                    return True
                if not node.available:
                    if not _waits_for_dependencies(node):
                        return True
                    if is_ready(self.graph, node):
                        # Pending values get created; a failed create gets another chance,
                        # since a dependency changed.
                        return self._create(key, node, node.value, node.origin, node.derived_from)
                    if node.state is ValueState.PENDING:
                        self._set_details(node)
                    else:
                        self._pend(node)
                    return True
                if not is_ready(self.graph, node):
                    return self._delete(node, pending=True)
                return True
            if value is None:
                return True if node is None else self._delete(node)
            if node is not None and _still_in_sb(node):
                # Its delete failed: the old value still exists, so this is an update.
                self.graph.touch(node)
                node.available = True
                ok = self._update(node, value, origin, metadata=metadata)
                if node.available:
                    self._dep_updates(key)
                return ok
            if node is None or not node.available:
                return self._create(key, node, value, origin, derived_from, metadata=metadata)
            return self._update(node, value, origin, metadata=metadata)
        finally:
            self._branch.discard(key)

    # -- create ----------------------------------------------------------------------------

    def _create(
        self,
        key: Key,
        node: Node | None,
        value: Value,
        origin: ValueOrigin,
        derived_from: Key | None,
        *,
        recreate: bool = False,
        metadata: Metadata = _NO_METADATA,
    ) -> bool:
        """Create a value that is not available (new, or e.g. PENDING or failed): validate it,
        work out its relations, wait (PENDING) until its dependencies exist, create it, then
        let its dependents and derived values follow."""
        node = self._node_to_create(key, node, value, origin, derived_from)
        if node is None:
            return False
        rec = _op_record(CREATE, node, value, recreate=recreate)
        self._touched(key)
        node.value = value
        if node.descriptor is None and derived_from is None:
            return self._unimplemented(node, rec)
        derived = self._prepare_create(node, rec, origin)
        if derived is None:
            return False
        if not is_ready(self.graph, node):
            return self._wait_for_dependencies(node, rec)
        try:
            new_metadata = self._create_in_sb(node, origin, metadata)
        except Exception as exc:  # descriptor failures are data, never crash the walk
            node.available = False
            self._fail(node, exc, rec)
            return False
        self._mark_created(node, rec, origin, new_metadata)
        self._dep_updates(key)
        self._apply_derived(node, derived, origin)
        return True

    def _node_to_create(
        self,
        key: Key,
        node: Node | None,
        value: Value,
        origin: ValueOrigin,
        derived_from: Key | None,
    ) -> Node | None:
        """``node`` taken over for the create, or a new node in the graph (None, with the
        transaction error recorded, when the key's descriptor cannot be told)."""
        graph = self.graph
        if node is not None:
            graph.touch(node)
            node.origin = origin
            node.derived_from = derived_from
            return node
        try:
            descriptor = self.registry.lookup(key)
        except ValueError as exc:
            self._reject(key, exc)
            return None
        node = Node(key, value, descriptor, origin, derived_from)
        if origin is NB and derived_from is None:
            node.nb_value = value
            node.nb_seq = self.ctx.seq
            node.retry_policy = self.ctx.retry
            node.retry_attempt = self.ctx.retry_attempt
        elif derived_from is not None:
            base = graph.get(derived_from)
            if base is not None:
                node.retry_policy = base.retry_policy
                node.retry_attempt = base.retry_attempt
        graph.add(node)
        return node

    def _unimplemented(self, node: Node, rec: RecordedOp) -> bool:
        """No descriptor selects the key (yet): kept, applied when one registers."""
        self.graph.set_deps(node, ())
        settle_node(node, Event.NO_DESCRIPTOR, op=CREATE)
        self.ctx.record(rec, node.state, noop=True)
        return True

    def _prepare_create(
        self, node: Node, rec: RecordedOp, origin: ValueOrigin
    ) -> DerivedPairs | None:
        """Validate the value (NB) and set its relations; its derived values, or None when
        the value is INVALID (validation or relations failed)."""
        graph = self.graph
        descriptor = node.descriptor
        value = node.value
        if descriptor is not None and origin is NB:
            invalid = self._validate(descriptor, node.key, value)
            if invalid is not None:
                graph.set_deps(node, ())
                self._invalid(node, rec, invalid)
                return None
        try:
            deps, derived = self._relations(node, descriptor, value)
        except DescriptorOutputError as exc:
            graph.set_deps(node, ())
            self._invalid(node, rec, exc)
            return None
        graph.set_deps(node, deps)
        node.derived = derived
        node.relations_of = value
        return derived

    def _wait_for_dependencies(self, node: Node, rec: RecordedOp) -> bool:
        missing = missing_labels(self.graph, node)
        settle_node(node, Event.DEPENDENCY_MISSING, op=CREATE, details=missing)
        rec.details = node.details  # a plan shows what the value waits for
        self.ctx.record(rec, node.state, noop=True)
        return True

    def _create_in_sb(self, node: Node, origin: ValueOrigin, metadata: Metadata) -> Metadata:
        """The CREATE call (NB values); SB values exist already (with the metadata given)."""
        if origin is SB:
            return None if metadata is _NO_METADATA else metadata
        if node.descriptor is None:
            return None  # a derived property: nothing to call
        return self._crud(CREATE, node, (node.value,))

    def _mark_created(
        self, node: Node, rec: RecordedOp, origin: ValueOrigin, metadata: Metadata
    ) -> None:
        node.available = True
        settle_node(node, Event.OBTAINED if origin is SB else Event.CREATED, op=CREATE)
        self._store_metadata(node, metadata, via_crud=origin is NB)
        rec.property = node.descriptor is None
        self.ctx.record(rec, node.state)

    # -- update ----------------------------------------------------------------------------

    def _update(
        self, node: Node, value: Value, origin: ValueOrigin, *, metadata: Metadata = _NO_METADATA
    ) -> bool:
        """Apply a new value to an available value: validate it (NB), then recreate it when
        the descriptor cannot update it in place, change it, or (equivalent and settled) only
        let its derived values follow."""
        key = node.key
        descriptor = node.descriptor
        rec = _op_record(UPDATE, node, value)
        if descriptor is not None and origin is NB:
            invalid = self._validate(descriptor, key, value)
            if isinstance(invalid, ConflictError) and node.origin is NB:
                # It gives way: removed, so the value that wins can take its place.
                if not self._delete(node, recreate=True):
                    return False
                return self._create(key, node, value, origin, node.derived_from, recreate=True)
            if invalid is not None:
                self.graph.touch(node)
                self._touched(key)
                return self._invalid(node, rec, invalid)

        compare = self.ctx.comparisons
        if descriptor is not None:
            equivalent = compare.equivalent(descriptor, key, rec.prev_value, value)
        else:
            equivalent = compare.same(key, rec.prev_value, value)
        if origin is SB or (node.origin is SB and origin is not NB):
            return self._update_obtained(node, value, equivalent, metadata, rec)

        if not equivalent and descriptor is not None:
            try:
                recreate = descriptor.needs_recreate(key, rec.prev_value, value, node.metadata)
            except Exception as exc:
                self.graph.touch(node)
                self._touched(key)
                self._fail(node, exc, rec)
                return False
            if recreate:
                if not self._delete(node, recreate=True):
                    return False
                return self._create(key, node, value, origin, node.derived_from, recreate=True)
        elif (
            equivalent
            and rec.prev_state in (ValueState.CONFIGURED, ValueState.OBTAINED)
            and node.origin is origin
            and compare.same(key, value, node.relations_of)
        ):
            # Nothing changed: only the derived values may need attention (e.g. a retry).
            self._apply_derived(node, node.derived, origin)
            return True
        return self._change(node, value, origin, equivalent, rec)

    def _change(
        self, node: Node, value: Value, origin: ValueOrigin, equivalent: bool, rec: RecordedOp
    ) -> bool:
        """The new relations first (derived values the new value no longer has go), then the
        value: updated (or adopted when equivalent); when it needs dependencies the old value
        did not, the old value is removed and the new one waits (PENDING)."""
        key = node.key
        prev_state = rec.prev_state
        self.graph.touch(node)
        self._touched(key)
        was_obtained = node.origin is SB
        if node.origin is not origin:
            node.relations_of = None  # relations depend on the origin (SB values have no deps)
        node.origin = origin
        try:
            deps, derived = self._relations(node, node.descriptor, value)
        except DescriptorOutputError as exc:
            return self._invalid(node, rec, exc)
        still_derived = self._set_relations(node, deps, derived, origin)

        if not is_ready(self.graph, node):
            node.derived = still_derived
            ok = self._delete(node, pending=True)
            node.value = value
            node.derived = derived
            node.relations_of = value
            if ok:
                node.details = missing_labels(self.graph, node)
            return ok

        if equivalent:
            # Equivalent value: adopt it silently (e.g. DISCOVERED -> CONFIGURED after resync).
            node.value = value
            if prev_state is not ValueState.CONFIGURED:
                settle_node(node, Event.UPDATED)
        elif not self._update_in_sb(node, value, rec, was_obtained):
            node.derived = still_derived
            return False
        node.derived = derived
        node.relations_of = value
        if prev_state not in (ValueState.CONFIGURED, ValueState.OBTAINED):
            # Healthy again (e.g. re-added after a failed delete): waiting dependents may proceed.
            self._dep_updates(key)
        self._apply_derived(node, derived, origin)
        return True

    def _update_in_sb(self, node: Node, value: Value, rec: RecordedOp, was_obtained: bool) -> bool:
        """The UPDATE call (none for a derived property); False when it failed."""
        new_metadata = node.metadata
        if node.descriptor is not None:
            try:
                new_metadata = self._crud(UPDATE, node, (rec.prev_value, value))
            except Exception as exc:
                self._fail(node, exc, rec)
                return False
        node.value = value
        settle_node(node, Event.UPDATED, op=UPDATE)
        self._store_metadata(node, new_metadata, via_crud=True)
        if was_obtained:
            rec.prev_state = ValueState.OBTAINED
        rec.property = node.descriptor is None
        self.ctx.record(rec, node.state)
        return True

    def _set_relations(
        self,
        node: Node,
        deps: tuple[Dependency, ...],
        derived: DerivedPairs,
        origin: ValueOrigin,
    ) -> DerivedPairs:
        """Set the dependencies of ``node`` and remove the derived values it no longer has;
        returns its former derived values that it still has."""
        old_derived = node.derived
        self.graph.set_deps(node, deps)
        new_keys = {dk for dk, _ in derived}
        for dk, _ in sorted(old_derived, reverse=True):
            if dk not in new_keys:
                self._apply(dk, None, origin, derived_from=node.key)
        return tuple(pair for pair in old_derived if pair[0] in new_keys)

    def _update_obtained(
        self,
        node: Node,
        value: Value,
        equivalent: bool,
        metadata: Metadata,
        rec: RecordedOp,
    ) -> bool:
        """SB-origin value changed (SB notification or refresh): no CRUD, follow derived."""
        graph = self.graph
        graph.touch(node)
        self._touched(node.key)
        if metadata is not _NO_METADATA:
            self._store_metadata(node, metadata, via_crud=False)
        if equivalent and self.ctx.comparisons.same(node.key, value, node.relations_of):
            return True
        try:
            deps, derived = self._relations(node, node.descriptor, value)
        except DescriptorOutputError:
            deps, derived = (), ()  # an SB value is taken as reported, without relations
        self._set_relations(node, deps, derived, SB)
        node.value = value
        node.derived = derived
        node.relations_of = value
        settle_node(node, Event.OBTAINED, op=None if equivalent else UPDATE, details=None)
        if not equivalent:
            self.ctx.record(rec, node.state)
        self._apply_derived(node, derived, SB)
        return True

    # -- delete ----------------------------------------------------------------------------

    def _delete(self, node: Node, *, pending: bool = False, recreate: bool = False) -> bool:
        graph = self.graph
        key = node.key
        prev_state = node.state
        descriptor = node.descriptor
        graph.touch(node)
        self._touched(key)
        rec = _op_record(DELETE, node, None, recreate=recreate)

        if not node.available:
            if pending:
                return True
            noop = True
            if _still_in_sb(node) and node.origin is NB and descriptor is not None:
                noop = False  # an earlier delete failed: try again
                try:
                    self._crud(DELETE, node, (node.value,))
                except Exception as exc:
                    self._fail(node, exc, rec)
                    return False
                self._drop_metadata(node, via_crud=True)
            # Otherwise nothing is in SB (pending, invalid, failed create, unimplemented, missing).
            self.ctx.record(rec, ValueState.REMOVED, noop=noop)
            for dk, _ in sorted(node.derived, reverse=True):
                if dk in graph.nodes:
                    self._apply(dk, None, node.origin, derived_from=key)
            settle_node(node, Event.DELETED, op=DELETE, details=None)
            graph.remove(key)
            return True

        node.available = False  # first, so the value no longer satisfies dependencies
        settle_node(node, Event.DELETING, details=None)

        for dk, _ in sorted(node.derived, reverse=True):
            if not self._apply(dk, None, node.origin, derived_from=key):
                return self._abort_delete(node, prev_state)
        for dependent in sorted(graph.dependents_of(key)):
            dnode = graph.get(dependent)
            if dnode is None or dnode.origin is not NB:
                continue
            if not dnode.available and dnode.state is ValueState.PENDING:
                continue  # already waiting
            if not dnode.available and not _waits_for_dependencies(dnode):
                continue
            if not any(dep.matches(key) for dep in dnode.deps):
                continue
            if not self._apply(dependent, None, NB, dep_update=True):
                return self._abort_delete(node, prev_state)

        via_crud = node.origin is NB and descriptor is not None
        if via_crud:
            try:
                self._crud(DELETE, node, (node.value,))
            except Exception as exc:
                self._fail(node, exc, rec)
                return False
        if descriptor is not None:
            self._drop_metadata(node, via_crud=via_crud)
        node.metadata = None
        rec.property = descriptor is None
        if pending:
            missing = missing_labels(graph, node)
            settle_node(node, Event.DEPENDENCY_MISSING, op=DELETE, details=missing)
            rec.details = node.details
            self.ctx.record(rec, node.state)
        else:
            settle_node(node, Event.DELETED, op=DELETE)
            self.ctx.record(rec, node.state)
            if not recreate:
                graph.remove(key)
        return True

    def _abort_delete(self, node: Node, prev_state: ValueState) -> bool:
        # A derived value or dependent could not be removed: the base stays as it was.
        node.available = True
        settle_node(node, Event.DELETE_ABORTED, op=DELETE, details=None, restore=prev_state)
        return False

    # -- helpers ---------------------------------------------------------------------------

    def _apply_derived(self, node: Node, derived: DerivedPairs, origin: ValueOrigin) -> None:
        graph = self.graph
        if derived and _derivation_depth(graph, node) >= MAX_DERIVATION_DEPTH:
            # A descriptor deriving from its own derived values would never end: refuse.
            exc = DerivedKeyError(
                f"{node.key!r}: derived values nested deeper than {MAX_DERIVATION_DEPTH} levels"
            )
            self.ctx.errors.setdefault(node.key, (CREATE, exc))
            return
        for dk, dv in derived:
            existing = graph.get(dk)
            if existing is not None and existing.derived_from != node.key:
                continue  # collides with a base value or another base's derived value: skipped
            self._apply(dk, dv, origin, derived_from=node.key)

    def _dep_updates(self, key: Key) -> None:
        graph = self.graph
        candidates = graph.dependents_of(key)
        if not candidates:
            return
        for dependent in sorted(candidates):
            dnode = graph.get(dependent)
            if dnode is None or dnode.origin is not NB:
                continue
            if not any(dep.matches(key) for dep in dnode.deps):
                continue
            self._apply(dependent, None, NB, dep_update=True)

    def _relations(
        self, node: Node, descriptor: Descriptor | None, value: Value
    ) -> tuple[tuple[Dependency, ...], DerivedPairs]:
        if node.relations_of is not None and self.ctx.comparisons.same(
            node.key, value, node.relations_of
        ):
            return node.deps, node.derived
        cache = self.ctx.relations_cache
        cached = cache.get(node.key)
        if cached is not None and cached[0] is value:
            return cached[1], cached[2]
        deps: tuple[Dependency, ...] = ()
        derived: DerivedPairs = ()
        if descriptor is not None:
            try:
                if descriptor.dependencies is not None and node.origin is NB:
                    deps = tuple(descriptor.dependencies(node.key, value) or ())
                if descriptor.derived_values is not None:
                    pairs = descriptor.derived_values(node.key, value) or ()
                    derived = tuple(
                        sorted(((dk, dv) for dk, dv in pairs if dv is not None), key=first)
                    )
            except Exception as exc:
                raise DescriptorOutputError(
                    f"descriptor {descriptor.name!r} failed on {node.key!r}: {exc!r}"
                ) from exc
            bad = [dep for dep in deps if not isinstance(dep, Dependency)]
            bad_keys = [dk for dk, _ in derived if not isinstance(dk, str) or not dk]
            if bad or bad_keys:
                raise DescriptorOutputError(
                    f"descriptor {descriptor.name!r} returned malformed relations for "
                    f"{node.key!r}: {(bad + bad_keys)[:3]!r}"
                )
        cache[node.key] = (value, deps, derived)
        return deps, derived

    def _validate(self, descriptor: Descriptor, key: Key, value: Value) -> BaseException | None:
        """The value's own validation, then whether it gives way to a conflicting value
        (not while a failed transaction is put back: the values were fine together before)."""
        invalid = self._validate_value(descriptor, key, value)
        if invalid is None and not self.ctx.reverting:
            why = self.ctx.refused.get(key)
            if why is not None:
                return ConflictError(why)
        return invalid

    def _validate_value(
        self, descriptor: Descriptor, key: Key, value: Value
    ) -> BaseException | None:
        if descriptor.validate is None:
            return None
        cached = self.ctx.validation_cache.get(key)
        if cached is not None and cached[0] is value:
            return cached[1]
        result: BaseException | None = None
        try:
            descriptor.validate(key, value)
        except Exception as exc:
            result = exc
        self.ctx.validation_cache[key] = (value, result)
        return result

    def _fail(self, node: Node, exc: BaseException, rec: RecordedOp) -> None:
        ctx = self.ctx
        descriptor = node.descriptor
        retriable = descriptor.retriable(exc) if descriptor is not None else False
        base = self._base(node)
        policy = base.retry_policy  # of the NB transaction that last set the base value
        attempt = ctx.next_attempt(base.key)
        to_be_reverted = ctx.revert or ctx.reverting
        if retriable and not to_be_reverted and policy is not None and policy.allows(attempt):
            settle_node(node, Event.FAILED_RETRYING, op=rec.op, cause=exc)
            ctx.retry_keys[node.key] = attempt
        else:
            settle_node(node, Event.FAILED, op=rec.op, cause=exc)
        ctx.failed.add(node.key)
        rec.error = exc
        self.ctx.record(rec, node.state)
        self._count_error(node, rec.op, exc)

    def _invalid(self, node: Node, rec: RecordedOp, exc: BaseException) -> bool:
        settle_node(node, Event.INVALID, op=rec.op, details=_invalid_fields(exc), cause=exc)
        rec.error = exc
        self.ctx.record(rec, node.state, noop=True)
        self._count_error(node, rec.op, exc)
        return False

    def _count_error(self, node: Node, op: TxnOperation, exc: BaseException) -> None:
        ctx = self.ctx
        if self._originates_in_txn(node):
            ctx.errors[node.key] = (op, exc)
            if ctx.revert and not ctx.reverting:
                ctx.stop = True

    def _base(self, node: Node) -> Node:
        return base_of(self.graph, node)

    def _originates_in_txn(self, node: Node) -> bool:
        keys = self.ctx.txn_keys
        return node.key in keys or self._base(node).key in keys

    def _reject(self, key: Key, exc: BaseException) -> None:
        self.ctx.errors[key] = (TxnOperation.UNDEFINED, exc)
        if self.ctx.revert and not self.ctx.reverting:
            self.ctx.stop = True

    def _set_nb(self, node: Node, value: Value) -> None:
        ctx = self.ctx
        changed = not ctx.comparisons.same(node.key, node.nb_value, value)
        sets_policy = ctx.retry_attempt == 0 and not ctx.keep_retry_policy
        policy_changed = sets_policy and (node.retry_policy != ctx.retry or node.retry_attempt != 0)
        if not changed and not policy_changed and ctx.retry_attempt == node.retry_attempt:
            return
        self.graph.touch(node)
        if changed:
            node.nb_value = value
            node.nb_seq = ctx.seq
        if sets_policy:
            node.retry_policy = ctx.retry
        node.retry_attempt = ctx.retry_attempt

    def _pend(self, node: Node) -> None:
        """A failed create whose dependency went away: it now waits for it like any value."""
        self.graph.touch(node)
        self._touched(node.key)
        settle_node(node, Event.DEPENDENCY_MISSING, details=missing_labels(self.graph, node))

    def _set_details(self, node: Node) -> None:
        details = missing_labels(self.graph, node)
        if details != node.details:
            self.graph.touch(node)
            node.details = details
            self._touched(node.key)

    def _crud(self, op: TxnOperation, node: Node, args: tuple[Value, ...]) -> Metadata:
        return self.effects.call(op, node, args)

    def _store_metadata(self, node: Node, metadata: Metadata, *, via_crud: bool) -> None:
        if not keeps_metadata(node):
            node.metadata = None
            return
        node.metadata = metadata
        self.effects.metadata(node, metadata, drop=False, by_call=via_crud)

    def _drop_metadata(self, node: Node, *, via_crud: bool) -> None:
        if keeps_metadata(node):
            self.effects.metadata(node, None, drop=True, by_call=via_crud)

    def _touched(self, key: Key) -> None:
        self.ctx.touched[key] = None


def base_of(graph: Graph, node: Node) -> Node:
    """The base value a (possibly nested) derived value comes from (the node itself if base)."""
    current = node
    for _ in range(64):  # derived-of-derived chains are short; never loop on bad data
        if current.derived_from is None:
            return current
        parent = graph.get(current.derived_from)
        if parent is None:
            return current
        current = parent
    return current


def _derivation_depth(graph: Graph, node: Node) -> int:
    depth = 0
    current: Node | None = node
    while current is not None and current.derived_from is not None:
        depth += 1
        if depth >= MAX_DERIVATION_DEPTH:
            break
        current = graph.get(current.derived_from)
    return depth


def _waits_for_dependencies(node: Node) -> bool:
    """Unavailable values that dependency changes may (re)create: pending ones and failed
    creates (not invalid, unimplemented or failed-delete values)."""
    if node.state is ValueState.PENDING:
        return True
    return node.state in (ValueState.FAILED, ValueState.RETRYING) and node.last_op is CREATE


def _still_in_sb(node: Node) -> bool:
    """Unavailable only because its delete failed: the value still exists in SB."""
    return (
        not node.available
        and node.last_op is DELETE
        and node.state in (ValueState.FAILED, ValueState.RETRYING)
    )


def _op_record(
    op: TxnOperation, node: Node, new_value: Value, *, recreate: bool = False
) -> RecordedOp:
    """The record of ``op`` on ``node``, taken before the node changes."""
    prev_value = node.value
    if op is CREATE and node.state is ValueState.NONEXISTENT:
        prev_value = None
    rec = RecordedOp(
        op,
        node.key,
        prev_value,
        new_value,
        node.state,
        prev_error=node.error,
        derived=node.derived_from is not None,
    )
    rec.recreate = recreate
    return rec


def _invalid_fields(exc: BaseException) -> tuple[str, ...]:
    if isinstance(exc, InvalidValueError):
        return exc.fields
    return ()
