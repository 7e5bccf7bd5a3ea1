"""Batch-making threads stopped before the interpreter exits.

fairseq's :class:`~fairseq.data.iterators.BufferedIterator` makes batches ahead in a daemon
thread (``--data-buffer-size``; with ``--num-workers 0`` the thread runs the collater
itself). When training stops at ``--max-update`` within an epoch, that thread is still
making batches as the interpreter finalizes; a daemon thread that returns from a PyTorch
call at that moment is ended by the interpreter while in C++ frames that must not unwind,
and the process aborts ("terminate called without an active exception", exit code 134)
after its work is saved. :func:`stop_background_batches`, run at exit, lets each such
thread finish the batch in hand and stop, so the process ends with its own exit code.
"""
import atexit
import threading
import time

#: the longest wait for one thread to finish its batch (a batch takes milliseconds)
TIMEOUT = 30.0


def stop_background_batches(timeout: float = TIMEOUT) -> None:
    """Stop fairseq's batch-making threads still running: each ends after the batch in
    hand, its queue emptied so that it does not wait for a consumer."""
    from fairseq.data.iterators import BackgroundConsumer

    threads = [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer) and t.is_alive()]
    for t in threads:
        t._max_len = 0  # the thread stops after handing over its next batch
    for t in threads:
        deadline = time.monotonic() + timeout
        while t.is_alive() and time.monotonic() < deadline:
            while not t._queue.empty():
                t._queue.get_nowait()
            t.join(0.01)


atexit.register(stop_background_batches)
