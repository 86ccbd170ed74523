"""The viewer's own small HTTP server (``groundplan view OUTPUT_DIR``); the Serve app mounts the same
routes at ``/`` (:func:`groundplan.serve.api.create_app`)."""
from __future__ import annotations

import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from groundplan.core.errors import ConflictError, InvalidInputError, NotFoundError
from groundplan.viewer import STATIC
from groundplan.viewer.data import ViewerData

log = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    data: ViewerData

    def log_message(self, fmt: str, *args: Any) -> None:  # route http.server's stderr lines to logging
        log.debug("view: " + fmt, *args)

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = [unquote(p) for p in urlparse(self.path).path.split("/") if p]
        try:
            if not parts:
                self._send(200, (STATIC / "viewer.html").read_bytes(), "text/html; charset=utf-8")
            elif parts == ["viewer.js"]:
                self._send(200, (STATIC / "viewer.js").read_bytes(), "text/javascript; charset=utf-8")
            elif parts == ["viewer", "api", "runs"]:
                self._send(200, json.dumps(self.data.runs()).encode(), "application/json")
            elif len(parts) == 4 and parts[:3] == ["viewer", "api", "runs"]:
                self._send(200, self.data.run_json(parts[3]).encode(), "application/json")
            elif len(parts) == 5 and parts[:3] == ["viewer", "api", "compare"]:
                self._send(200, self.data.compare_json(parts[3], parts[4]).encode(), "application/json")
            elif len(parts) == 5 and parts[:2] == ["viewer", "frames"]:
                self._send(200, self.data.frame_path(*parts[2:]).read_bytes(), "image/png")
            else:
                raise NotFoundError(f"no page {self.path!r}")
        except NotFoundError as exc:
            self._send(HTTPStatus.NOT_FOUND, json.dumps({"detail": str(exc)}).encode(), "application/json")
        except ConflictError as exc:  # e.g. two runs that share no episode
            self._send(HTTPStatus.CONFLICT, json.dumps({"detail": str(exc)}).encode(), "application/json")
        except InvalidInputError as exc:
            self._send(HTTPStatus.UNPROCESSABLE_ENTITY, json.dumps({"detail": str(exc)}).encode(), "application/json")


def make_server(root: str | Path, host: str = "127.0.0.1", port: int = 8001) -> ThreadingHTTPServer:
    """The viewer's HTTP server (not started); ``port=0`` picks a free one."""
    handler = type("ViewerHandler", (_Handler,), {"data": ViewerData(root)})
    return ThreadingHTTPServer((host, port), handler)


def check_folder(root: str | Path) -> None:
    if not Path(root).is_dir():
        raise InvalidInputError(f"{root} is not a folder; give an output folder (e.g. outputs/saycan_kitchen)")


def serve_viewer(root: str | Path, host: str = "127.0.0.1", port: int = 8001) -> None:
    """``groundplan view``: serve until interrupted."""
    check_folder(root)
    server = make_server(root, host, port)
    log.info("trace viewer of %s at http://%s:%d/", root, host, server.server_address[1])
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
