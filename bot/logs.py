"""Log output for `serve` and `worker`: plain text for a terminal, or one JSON object per line
(`--log-format json`) for a log pipeline, carrying the approval id, tenant and actor that
transitions attach to their records."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from bot.clock import utc_iso

# Fields signoff attaches with `extra=`; they become top-level keys of the JSON line.
_FIELDS = ("approval_id", "tenant", "actor", "event", "state", "job_id")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": utc_iso(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def setup(log_format: str = "text", level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiohttp's access log is one line per request: useful, but not at the default level.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
