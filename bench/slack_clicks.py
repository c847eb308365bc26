"""Slack clicks: signed block_actions requests to `POST /slack/events`, offered at a fixed
rate, each deciding a different approval; the latency of each HTTP answer, and how long
until every card update and decision webhook has arrived.

Bolt runs with `process_before_response`, so the answer goes out after the decision has
committed: the latency measured is the whole decision as Slack waits for it (target: p99
under 50 ms at 100 clicks/s; Slack gives 3 s). This is bench/service.py's `slack_clicks`
scenario alone: `signoff serve`, the fake Slack Web API with the webhook receiver, and the
clicks each in a process of its own, cards and webhooks on.

    python bench/slack_clicks.py [--rate 100] [--seconds 10] [--with-creates]
                                 [--quiet-reference] [--workers N]
                                 [--databases sqlite,postgresql] [--postgres URL]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import service


def main() -> None:
    service.main(scenarios="slack_clicks", with_creates=False, quiet_reference=False)


if __name__ == "__main__":
    main()
