"""A small HTTP/3 client for the tests, on aioquic (Debian's curl has no HTTP/3)."""

import asyncio
import ssl
import time
from dataclasses import dataclass, field

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration

TIMEOUT = 20


@dataclass
class H3Response:
    status: int = 0
    headers: list = field(default_factory=list)  # (name, value) pairs, as str
    body: bytes = b""
    chunks: list = field(default_factory=list)  # (seconds since the request, data)

    def header_values(self, name):
        return [v for k, v in self.headers if k == name.lower()]


class _Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._h3 = H3Connection(self._quic)
        self._pending = {}  # stream id -> (response, start time, future)

    def quic_event_received(self, event):
        for ev in self._h3.handle_event(event):
            if not isinstance(ev, (HeadersReceived, DataReceived)) or ev.stream_id not in self._pending:
                continue
            resp, start, done = self._pending[ev.stream_id]
            if isinstance(ev, HeadersReceived):
                for k, v in ev.headers:
                    if k == b":status":
                        resp.status = int(v)
                    else:
                        resp.headers.append((k.decode(), v.decode("utf-8", "replace")))
            elif ev.data:
                resp.body += ev.data
                resp.chunks.append((time.monotonic() - start, ev.data))
            if ev.stream_ended:
                del self._pending[ev.stream_id]
                done.set_result(resp)

    async def request(self, authority, method, path, headers=(), body=b""):
        stream = self._quic.get_next_available_stream_id()
        fields = [(b":method", method.encode()), (b":scheme", b"https"), (b":authority", authority.encode()),
                  (b":path", path.encode())]
        fields += [(k.lower().encode(), v.encode()) for k, v in headers]
        done = asyncio.get_running_loop().create_future()
        self._pending[stream] = (H3Response(), time.monotonic(), done)
        self._h3.send_headers(stream, fields, end_stream=not body)
        if body:
            self._h3.send_data(stream, body, end_stream=True)
        self.transmit()
        return await asyncio.wait_for(done, TIMEOUT)


def requests(port, specs):
    """Sends each (method, path, headers, body) as a stream of one HTTP/3 connection to
    127.0.0.1:port, all at once; returns the responses in order."""
    async def run():
        config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE)
        async with connect("127.0.0.1", port, configuration=config, create_protocol=_Client) as client:
            return await asyncio.gather(*(client.request(f"127.0.0.1:{port}", *spec) for spec in specs))
    return asyncio.run(asyncio.wait_for(run(), TIMEOUT * 2))


def request(port, method, path, headers=(), body=b""):
    return requests(port, [(method, path, headers, body)])[0]
