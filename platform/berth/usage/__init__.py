"""Usage accounting and budgets: what each model call costs, who made it, and how much a scope may spend.

* :mod:`berth.usage.prices` — a call's cost by ``platform.models.prices`` (``assembly.yaml``), and the tokens
  it counts (input + output + cache read + cache write);
* :mod:`berth.usage.periods` — UTC days and months, the periods budgets count in, and when they reset;
* :mod:`berth.usage.totals` — the running totals of the current day and month, per tenant, project and user;
* :mod:`berth.usage.budgets` — which budget of ``gateway.yaml`` is used up, and the message and details to say so;
* :mod:`berth.usage.ledger` — :class:`UsageLedger`, the host's ledger, and the per-turn meter it hands the runtime;
* :mod:`berth.usage.report` — the usage of a tenant/project in a period, grouped, for the API and the CLI.
"""

from berth.usage.budgets import ExhaustedBudget
from berth.usage.ledger import TurnUsageMeter, UsageLedger
from berth.usage.report import UsageQueryError, UsageReport, usage_report

__all__ = ["ExhaustedBudget", "TurnUsageMeter", "UsageLedger", "UsageQueryError", "UsageReport", "usage_report"]
