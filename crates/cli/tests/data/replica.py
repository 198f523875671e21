# A test replica for the service tests: serves HTTP/1.1 on $PORT.
#   GET /health      200, or 503 while the file $UNREADY_DIR/unready-$GANTRY_JOB_ID exists
#   GET /slow?s=0.5  answers after sleeping that long (default $DELAY, else 0)
#   GET /stream      three chunks, 0.2 s apart (chunked transfer); ?n=25&gap=0.1: n chunks, gap s apart
#   GET /metrics     `replica_waiting N` (Prometheus text), N from the file $UNREADY_DIR/waiting (else 0)
#   GET /...         "<job id> <VERSION>\n"
# Once listening it writes its pid to $UNREADY_DIR/pid-$GANTRY_JOB_ID (tests kill it).
import http.server
import os
import socketserver
import time
import urllib.parse

JOB = os.environ.get("GANTRY_JOB_ID", "?")
VERSION = os.environ.get("VERSION", "1")
UNREADY = os.path.join(os.environ.get("UNREADY_DIR", "/nonexistent"), "unready-" + JOB)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path == "/health":
            self.answer(503 if os.path.exists(UNREADY) else 200, b"ok\n")
        elif url.path == "/metrics":
            try:
                with open(os.path.join(os.environ.get("UNREADY_DIR", "/nonexistent"), "waiting")) as f:
                    waiting = float(f.read().strip() or 0)
            except OSError:
                waiting = 0
            body = '# TYPE replica_waiting gauge\nreplica_waiting{replica="%s"} %g\n' % (JOB, waiting)
            self.answer(200, body.encode())
        elif url.path == "/stream":
            query = urllib.parse.parse_qs(url.query)
            n, gap = int(query.get("n", ["3"])[0]), float(query.get("gap", ["0.2"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(n):
                chunk = ("data: token %d\n\n" % i).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                time.sleep(gap)
            done = b"data: [DONE]\n\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        else:
            if url.path == "/slow":
                query = urllib.parse.parse_qs(url.query)
                time.sleep(float(query.get("s", [os.environ.get("DELAY", "0")])[0]))
            self.answer(200, ("%s %s\n" % (JOB, VERSION)).encode())

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


server = Server(("0.0.0.0", int(os.environ["PORT"])), Handler)
if os.path.isdir(os.environ.get("UNREADY_DIR", "/nonexistent")):
    with open(os.path.join(os.environ["UNREADY_DIR"], "pid-" + JOB), "w") as f:
        f.write(str(os.getpid()))
server.serve_forever()
