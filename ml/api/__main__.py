"""Serve the dashboard and the API for one loop repository.

    python -m ml.api --repo . --port 8765            # http://127.0.0.1:8765/
    python -m ml.api --host 0.0.0.0 --token SECRET   # reachable from other machines; controls need the token
    python -m ml.api --max-body-bytes 67108864       # accept request bodies up to 64 MiB (default 32 MiB)

Bound to 127.0.0.1 by default. On any other address the control endpoints (start, pause,
resume, stop) answer 403 unless a token is set (--token or DISTILL_API_TOKEN); with a token,
requests send ``Authorization: Bearer <token>``. Stopping the server leaves the loop running;
a restarted server finds it again. A request body over --max-body-bytes is answered 413
without being read (``ml.api.policy.DEFAULT_MAX_BODY_BYTES``: 4096 decision points of 8 KiB).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import uvicorn

from ml.api.app import create_app, is_loopback
from ml.api.policy import DEFAULT_MAX_BODY_BYTES
from ml.api.readers import RepoReadError
from ml.base.cli_args import body_bytes, port

TOKEN_ENV = "DISTILL_API_TOKEN"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m ml.api", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--repo", type=Path, default=Path("."), help="loop repository root (default: current directory)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=port, default=8765, help="port, 1-65535 (default: 8765)")
    p.add_argument("--token", default=None, help=f"bearer token of the control endpoints (default: ${TOKEN_ENV})")
    p.add_argument(
        "--max-body-bytes", type=body_bytes, default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest request body in bytes, 413 beyond it (default: {DEFAULT_MAX_BODY_BYTES}, 4096 decision points of 8 KiB)",
    )  # fmt: skip
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"], help="server log level")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s api %(levelname)s %(message)s")
    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        app = create_app(args.repo, bind_host=args.host, token=token, max_body_bytes=args.max_body_bytes)
    except RepoReadError as e:
        print(f"python -m ml.api: {e}", file=sys.stderr)
        return 2
    if token is None and not is_loopback(args.host):
        logging.warning("listening on %s without a token: the control endpoints answer 403", args.host)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
