"""The benchmark smoke pass's load generator (tests/bench/quickload.py) against a local
HTTP server: it sends what oha's arguments say, counts every status and every failed
connection, and paces a given rate.

    python3 -m unittest discover -s tests/scripts -v
"""

import http.server
import importlib.util
import tempfile
import threading
import time
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "tests" / "bench"
spec = importlib.util.spec_from_file_location("quickload", BENCH / "quickload.py")
quickload = importlib.util.module_from_spec(spec)
spec.loader.exec_module(quickload)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the servers under test
    seen = []  # (method, path, content type, cookie, body)

    def answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Handler.seen.append((self.command, self.path, self.headers.get("Content-Type"),
                             self.headers.get("Cookie"), body))
        if self.path == "/close":  # the server ends the connection mid-answer
            self.close_connection = True
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
            return
        status = 500 if self.path == "/fail" else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = answer

    def log_message(self, *args):
        pass


class QuickLoadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.base = f"http://127.0.0.1:{cls.server.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def setUp(self):
        Handler.seen.clear()

    def test_sends_the_requests_asked_for_and_counts_their_statuses(self):
        d = quickload.run(self.base + "/page?x=1", conns=4, requests=10)
        self.assertEqual(d["statusCodeDistribution"], {"200": 10})
        self.assertEqual(d["errorDistribution"], {})
        self.assertEqual(len(Handler.seen), 10)
        self.assertTrue(all(s[:2] == ("GET", "/page?x=1") for s in Handler.seen))
        self.assertGreater(d["summary"]["requestsPerSec"], 0)
        self.assertIsNotNone(d["latencyPercentiles"]["p99"])

    def test_a_failing_page_is_counted_as_its_status(self):
        d = quickload.run(self.base + "/fail", conns=2, requests=3)
        self.assertEqual(d["statusCodeDistribution"], {"500": 3})

    def test_a_cut_answer_is_an_error_not_a_success(self):
        d = quickload.run(self.base + "/close", conns=1, requests=2)
        self.assertEqual(d["statusCodeDistribution"], {})
        self.assertEqual(sum(d["errorDistribution"].values()), 2)

    def test_method_body_content_type_and_header_come_from_ohas_arguments(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"payload")
            f.flush()
            quickload.run(self.base + "/upload", conns=1, requests=1,
                          extra=["-m", "POST", "-T", "application/octet-stream", "-D", f.name,
                                 "-H", "Cookie: session=abc"])
        self.assertEqual(Handler.seen, [("POST", "/upload", "application/octet-stream", "session=abc", b"payload")])

    def test_an_argument_it_does_not_know_is_refused(self):
        with self.assertRaises(ValueError):
            quickload.run(self.base + "/", conns=1, requests=1, extra=["--http2", "x"])

    def test_a_rate_paces_the_requests(self):
        started = time.monotonic()
        d = quickload.run(self.base + "/", conns=4, requests=6, rate=20)
        # The sixth request may start 5/20 s after the first.
        self.assertGreaterEqual(time.monotonic() - started, 0.25)
        self.assertEqual(d["statusCodeDistribution"], {"200": 6})


if __name__ == "__main__":
    unittest.main()
