"""An upload whose disk is slower than its client (server/http/loop.py with the batch
spool's sinks): the loop stops reading that connection while the sink is full -- what
waits for the disk stays under the sink's bound while the client still has megabytes to
send -- keeps serving everyone else, and reads on when the writer wakes it."""
from __future__ import annotations

import threading

from server.batch.spool import QUEUED_BYTES_MAX, UploadSpool
from server.door.auth import ApiKeyCheck
from server.http.loop import RECV_BYTES
from server.http.protocol import Response
from tests.server.batch.spool_fakes import gated_writer
from tests.polling import wait_for
from tests.server.http.loop_harness import WAIT_S, Client, EchoApp, SelectWatch, serving

BODY_BYTES = 48 * 2**20        # far more than the socket buffers hold: the client must wait


class SizeApp(EchoApp):
    """Answers an upload with the size its sink took; everything else as EchoApp."""

    def handle(self, request):
        if request.spooled is not None:
            return Response(status=200, body=b"%d" % request.spooled.size_bytes)
        return super().handle(request)


class RecordingSpool(UploadSpool):
    """The spool, keeping the sinks it made."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.made = []

    def sink_for(self, method, path, headers):
        sink = super().sink_for(method, path, headers)
        self.made.append(sink)
        return sink


def test_a_full_sink_pauses_its_upload_and_the_writer_resumes_it(tmp_path):
    gate = threading.Event()                          # the disk: stuck until set
    writer, files = gated_writer(gate)
    spool = RecordingSpool(tmp_path, max_file_bytes=BODY_BYTES, auth=ApiKeyCheck(""),
                        writer=writer)
    watch = SelectWatch()
    sent = threading.Event()
    with serving(SizeApp(), sinks=spool, watch=watch) as (loop, _):
        uploader = Client(loop.bound_address("api"))
        head = b"POST /v1/files HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % BODY_BYTES

        def send_all():
            uploader.send(head + b"u" * BODY_BYTES)
            sent.set()

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        assert wait_for(lambda: spool.made)
        [sink] = spool.made
        assert wait_for(lambda: not sink.has_room)
        assert wait_for(watch.is_waiting)
        other = Client(loop.bound_address("api"))     # everyone else is still served
        other.send(b"GET /ping HTTP/1.1\r\nHost: t\r\n\r\n")
        assert other.read_response()[0] == 200
        assert wait_for(watch.is_waiting)
        assert not sent.is_set()                      # the client still has bytes to send
        assert sink.queued_bytes <= QUEUED_BYTES_MAX + RECV_BYTES   # none of them read
        gate.set()
        status, _, body = uploader.read_response()
        assert (status, body) == (200, b"%d" % BODY_BYTES)
        assert sent.wait(WAIT_S)
        assert sink.landing.wait() is None
        [file] = files
        assert file.real.closed and sink.path.stat().st_size == BODY_BYTES
        uploader.close()
        other.close()
    assert not writer._thread.is_alive()              # the loop's end stopped the writer
