"""Every exception `durability` raises, in one place.

Each class also derives from the built-in exception a caller would naturally catch, so
``except KeyError`` still works for a missing checkpoint and ``except ValueError`` for a value
the codec refuses. Every message names the action that was attempted, the offending value and
what to do next. Secrets (API keys, passwords in URLs) never appear in a message.

::

    DurabilityError
    ├── ConfigError (ValueError)               bad settings, URL, removed variable
    │   └── RetentionError                     a declared retention the rules refuse
    ├── MissingExtra (ImportError)             a feature whose optional packages are not installed
    ├── CodecError (ValueError)                a value refused at write, or unreadable at read
    ├── StoreError
    │   ├── CheckpointNotFound (KeyError)
    │   ├── CheckpointConflict                 a checkpoint id already stored in the thread
    │   ├── ThreadErased                       a write to a thread erased (tombstoned)
    │   ├── InvalidIdError (ValueError)        an id the store cannot hold (empty, NUL, too long)
    │   ├── CheckpointStoreFormatError         the store holds another format generation
    │   ├── StoreUnavailable (ConnectionError) the backend cannot be reached
    │   ├── CheckpointDeleteError              a delete that stops making progress
    │   ├── CapabilityError                    the store lacks an optional capability
    │   │   └── ReadOnlyStoreError             a write to a store opened read-only (a foreign one)
    │   ├── ParkRefused (ValueError)           a park the park rules refuse
    │   ├── LeaseError
    │   │   ├── LeaseHeld                      another holder has a live lease
    │   │   └── LeaseLost                      the caller's lease expired or was taken
    │   └── EncryptionError                    sealed checkpoint state that cannot be used
    │       ├── StateEncrypted                 state asked of a store opened without its keys
    │       ├── PlaintextRefused               a clear row read by a store that encrypts
    │       ├── KeyMissing (KeyError)          a row sealed under a key the keyring lacks
    │       └── DecryptionFailed               a ciphertext that does not open (tampered, moved)
    ├── ReplicationError                       talking to the control plane
    │   └── PlaneRoutingError (+RestoreError)  a thread's path did not reach the plane's handler
    ├── RestoreError
    │   └── ErasedOnPlane                      the plane erased the thread; nothing restores it
    ├── CopyRefused                            a copy that would mix other checkpoints into a thread
    ├── RunError                               the durable runner refused or failed an operation
    │   └── RunNotResumable                    a completed run, or nothing to resume from
    │       └── AlreadyResumed                 another worker resumed the run first
    ├── SweepError
    │   └── SweepLocked                        another sweep of the same store is running
    └── NotebookError (RuntimeError)           a bundled notebook is missing or failed to execute
"""

from __future__ import annotations


class DurabilityError(Exception):
    """Root of every error raised by `durability`."""


class ConfigError(DurabilityError, ValueError):
    """A setting, URL or environment variable that cannot be used."""


class RetentionError(ConfigError):
    """A declared retention the rules of a thread's own retention refuse (longer than the
    platform's value, or a finished retention longer than the declared waiting one)."""


class MissingExtra(DurabilityError, ImportError):
    """A feature whose optional packages are not installed; the message names the extra."""


class CodecError(DurabilityError, ValueError):
    """A value the codec refuses to write, or a stored value it cannot read back.

    ``path`` names where in the value the problem is, e.g. ``state.items[3].when``.
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class StoreError(DurabilityError):
    """A checkpoint store operation failed."""


class CheckpointNotFound(StoreError, KeyError):
    """No checkpoint (or thread) matches the ids asked for."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class CheckpointConflict(StoreError):
    """A checkpoint id is already stored in the thread; stores never overwrite silently."""


class ThreadErased(StoreError):
    """A write to a thread that was erased: its tombstone refuses every later put.

    ``tombstone`` is the keyed hash the tombstone holds (never the thread id).
    """

    def __init__(self, message: str, tombstone: str = "") -> None:
        super().__init__(message)
        self.tombstone = tombstone


class InvalidIdError(StoreError, ValueError):
    """An id the store cannot hold: empty where one is required, over 65,536 characters, or
    containing NUL or a lone surrogate."""


class CheckpointStoreFormatError(StoreError):
    """The store holds checkpoints of another format generation, or none recorded; reset it with
    ``durability store reset URL``."""


class StoreNeedsMigration(StoreError):
    """The store's schema needs a migration that rewrites a large table; run
    ``durability store migrate URL`` (it shows its plan, reports progress and resumes)."""


class StoreUnavailable(StoreError, ConnectionError):
    """The store's backend cannot be reached or dropped the connection mid-operation."""


class CheckpointDeleteError(StoreError):
    """Deleting a thread stopped making progress while writers kept adding to it."""


class CapabilityError(StoreError):
    """The store lacks an optional capability the operation needs."""


class ReadOnlyStoreError(CapabilityError):
    """A write to a store durability opened read-only: a fastaiagent or LangGraph store it reads in place."""


class ParkRefused(StoreError, ValueError):
    """A park the rules refuse: no deadline, past the waiting horizon, or a store that cannot hold one."""


class LeaseError(StoreError):
    """A run's lease on its thread could not be taken or kept."""


class LeaseHeld(LeaseError):
    """Another holder has a live lease on the thread."""


class LeaseLost(LeaseError):
    """The caller's lease expired or was taken over; the run must stop writing."""


class EncryptionError(StoreError):
    """Sealed checkpoint state (customer-held encryption) could not be used. Messages name the
    row and key ids, never a key."""


class StateEncrypted(EncryptionError):
    """The state asked for is sealed and the store was opened without a keyring."""


class PlaintextRefused(EncryptionError):
    """A store that encrypts read a row held in clear (fail-closed; ``allow_plaintext=True``
    reads it during a migration)."""


class KeyMissing(EncryptionError, KeyError):
    """A row is sealed under a key id the keyring does not hold."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class DecryptionFailed(EncryptionError):
    """A ciphertext did not open under its key: tampered, damaged, or moved to another row."""


class ReplicationError(DurabilityError):
    """Talking to the control plane failed.

    ``retryable`` says whether the same request may succeed later; ``hint`` says what to do.
    """

    def __init__(self, message: str, *, retryable: bool = True, hint: str = "") -> None:
        super().__init__(message)
        self.retryable = retryable
        self.hint = hint


class RestoreError(DurabilityError):
    """A restore from the plane was refused or failed."""


class ErasedOnPlane(RestoreError):
    """The plane erased the thread: it serves nothing of it, and nothing restores it."""


class CopyRefused(DurabilityError):
    """A copy refused before writing anything (a destination thread holding other checkpoints,
    a destination that is not a durability store)."""


class PlaneRoutingError(ReplicationError, RestoreError):
    """A read of one thread was answered by a router or proxy in front of the plane, not by the
    plane (a 404 that does not name the execution, a 414, a 431): whether the plane holds the
    thread is unknown, so a restore fails rather than report "nothing on the plane"."""


class RunError(DurabilityError):
    """The durable runner refused or failed an operation on a run."""


class RunNotResumable(RunError):
    """The run cannot be resumed (it completed, or has nothing to resume from)."""


class AlreadyResumed(RunNotResumable):
    """Another worker resumed the run first: of competing resumers exactly one wins."""


class SweepError(DurabilityError):
    """The checkpoint sweep failed; nothing after the failure point was deleted."""


class SweepLocked(SweepError):
    """Another sweep holds the store's sweep lock; the message names its holder and since when."""


class NotebookError(DurabilityError, RuntimeError):
    """A notebook of the bundle is missing, or failed to execute (the partly executed copy was
    still written)."""
