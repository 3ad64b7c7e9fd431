"""The four tasks of the speculation benchmark (bench/spec_bench.py) as request bodies.

Each task is a fixed pool of distinct chat requests, written for the benchmark before its
first measurement and never derived from what a server answered. A pool is big
enough that one server process never gets a request twice (bench/spec_plan.py checks it): a
repeated request would find its own answer in the suffix draft store.

  edit     rewrite a 300-600-token file with a one-line change (bench/spec_files.py: four
           files, ten changes each, 40 requests); `prediction` = the original file, the draft
           a predicted output gives. No `ignore_eos`: the answer ends where the model ends
           the file.
  extract  a support e-mail into a JSON Schema made from a pydantic model (9 fields, four
           enums, two nested objects), `response_format` json_schema strict; 48 e-mails from
           six scenarios with the sender, plan, order, amount and head count varied.
  agent    a travel assistant's loop: 10 turns, each one request with the growing history,
           the assistant's earlier calls of `get_weather` / `get_time` and their results
           appended (scripted, so every run sends the same turns), the next call forced with
           tool_choice "required" (a 135M model would often answer in prose otherwise); six
           trips of five cities each (no city in two trips), 60 requests.
  chat     bench/load_server.py's load-sweep prompts, 128 tokens, `ignore_eos` (endless,
           each numbered).

`Task.body(i, model, foreign)` is request i of the cycle as bytes (streaming, usage on,
temperature 0); `foreign`: for a server without our extensions (llama-server), so no
`prediction` (it would decode the edit plainly).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from bench.load_server import chat_prompt
from bench.spec_files import FILES, EditFile

EDIT_MAX_TOKENS = 800            # the longest file is < 600 tokens: room for the whole answer
EXTRACT_MAX_TOKENS = 400
AGENT_MAX_TOKENS = 96            # one tool call
CHAT_MAX_TOKENS = 128            # as the load sweep
AGENT_TURNS = 10
AGENT_TRIPS = 6                  # 60 requests: a run of 32 and its warm-up never repeat one
CHAT_MIN_REQUESTS = 4
EXTRACT_SYSTEM = ("Extract the support ticket from the customer's e-mail. Answer with JSON "
                  "that follows the schema.")
AGENT_SYSTEM = ("You are a travel assistant. Use the tools to look up the weather and the "
                "local time of every city the user mentions, one call at a time.")


class Plan(str, Enum):
    free = "free"
    pro = "pro"
    enterprise = "enterprise"


class Category(str, Enum):
    billing = "billing"
    bug = "bug"
    feature_request = "feature_request"
    account = "account"
    outage = "outage"


class Priority(str, Enum):
    low = "low"
    medium = "medium"
    high = "high"
    urgent = "urgent"


class Sentiment(str, Enum):
    positive = "positive"
    neutral = "neutral"
    negative = "negative"


class Customer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    email: str
    plan: Plan


class OrderRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str
    amount_eur: float


class SupportTicket(BaseModel):
    """What the extraction task asks for: 9 fields, enums, nested objects."""
    model_config = ConfigDict(extra="forbid")
    customer: Customer
    category: Category
    priority: Priority
    sentiment: Sentiment
    product_area: str = Field(description="the part of the product the e-mail is about")
    summary: str = Field(description="one sentence")
    affected_users: int
    order: OrderRef
    requested_action: str


def ticket_schema() -> dict:
    """SupportTicket's JSON Schema as pydantic writes it ($defs, $ref, enums)."""
    return SupportTicket.model_json_schema()


# Support e-mails: EXTRACT_EMAILS of them, from six scenarios whose people, plans, orders,
# amounts and head counts vary with the index, so no e-mail (and no answer) repeats in a run.
EXTRACT_EMAILS = 48
SCENARIOS = (
    ("Charged twice", "Hello, we are on the {plan} plan and our card was charged twice for "
     "order {order} ({amount} EUR each time). Only I handle billing, so it is just me "
     "affected, but I need the second charge refunded before the end of the month."),
    ("Dashboard down for everyone", "Since {clock} this morning the analytics dashboard shows "
     "a blank page for all {users} people in our company. We are on the {plan} plan; this is "
     "the second outage this month. Please restore it immediately and send us an incident report. "
     "Order reference {order}, {amount} EUR yearly contract."),
    ("Idea: dark mode for the mobile app", "Hi! I love the app ({plan} plan) and use it every "
     "evening. Could you add a dark mode to the mobile app? Not urgent at all. My last in-app "
     "purchase was order {order} for {amount} EUR. Keep up the good work!"),
    ("Export button broken", "The CSV export in the reports section fails with 'unknown error' "
     "since yesterday's update. {users} of us on the team rely on it for the weekly report due "
     "Friday. We are on the {plan} plan, order {order}, {amount} EUR. Please fix or tell us a workaround."),
    ("Cannot log in", "Since I changed my e-mail address I cannot log in, and the password "
     "reset mails never arrive. {users} colleagues share this {plan} account (order {order}, "
     "{amount} EUR), so please move it to this address quickly."),
    ("Cancel our subscription", "Please cancel our {plan} subscription at the end of this month "
     "and refund the unused days of order {order} ({amount} EUR). We are {users} people and "
     "moved to another tool; nothing is broken."),
)
PEOPLE = (("Maria", "Lindqvist"), ("Tom", "Okafor"), ("Aiko", "Tanaka"), ("Pedro", "Alves"),
          ("Sofia", "Rossi"), ("Jonas", "Weber"), ("Amara", "Diallo"), ("Liam", "Murphy"),
          ("Chen", "Wei"), ("Fatima", "Haddad"), ("Noah", "Berg"), ("Elena", "Petrova"),
          ("Ravi", "Sharma"), ("Grace", "Mensah"), ("Lucas", "Moreau"), ("Hana", "Kim"))
COMPANIES = ("northwind", "brightlabs", "quinta", "bluepeak", "harbourline", "tessera",
             "greenfield", "orbitware")
PLANS = ("Free", "Pro", "Enterprise")


def support_email(k: int) -> str:
    """E-mail k: scenario k mod 6; the sender, company, plan, order id (unique per k),
    amount and head count drawn from k."""
    subject, text = SCENARIOS[k % len(SCENARIOS)]
    first, last = PEOPLE[(5 * k) % len(PEOPLE)]
    company = COMPANIES[(3 * k + 1) % len(COMPANIES)]
    body = text.format(plan=PLANS[(k // 2) % len(PLANS)], order=f"{company[:2].upper()}-{20931 + 37 * k}",
                       amount=f"{4.99 + 61.25 * (k % 9):.2f}", users=2 + (7 * k) % 40,
                       clock=f"{7 + k % 3}:{(13 * k) % 60:02d}")
    return (f"From: {first} {last} <{first.lower()}.{last.lower()}@{company}.example>\n"
            f"Subject: {subject}\n\n{body} Regards, {first}")


# (city, IANA zone, temperature C, sky): five cities per trip, none in two trips.
CITIES = (("Lisbon", "Europe/Lisbon", 21, "sunny"), ("Oslo", "Europe/Oslo", 4, "snow"),
          ("Nairobi", "Africa/Nairobi", 24, "cloudy"), ("Tokyo", "Asia/Tokyo", 12, "rain"),
          ("Lima", "America/Lima", 18, "fog"), ("Reykjavik", "Atlantic/Reykjavik", 2, "windy"),
          ("Cairo", "Africa/Cairo", 29, "sunny"), ("Mumbai", "Asia/Kolkata", 31, "humid"),
          ("Sydney", "Australia/Sydney", 19, "clear"), ("Toronto", "America/Toronto", -3, "snow"),
          ("Madrid", "Europe/Madrid", 17, "clear"), ("Helsinki", "Europe/Helsinki", -1, "cloudy"),
          ("Lagos", "Africa/Lagos", 30, "storms"), ("Seoul", "Asia/Seoul", 8, "clear"),
          ("Bogota", "America/Bogota", 14, "rain"), ("Athens", "Europe/Athens", 20, "sunny"),
          ("Warsaw", "Europe/Warsaw", 6, "cloudy"), ("Casablanca", "Africa/Casablanca", 22, "windy"),
          ("Bangkok", "Asia/Bangkok", 33, "humid"), ("Santiago", "America/Santiago", 16, "clear"),
          ("Dublin", "Europe/Dublin", 9, "drizzle"), ("Vienna", "Europe/Vienna", 7, "fog"),
          ("Accra", "Africa/Accra", 28, "cloudy"), ("Jakarta", "Asia/Jakarta", 30, "storms"),
          ("Denver", "America/Denver", 11, "sunny"), ("Prague", "Europe/Prague", 5, "snow"),
          ("Istanbul", "Europe/Istanbul", 15, "rain"), ("Manila", "Asia/Manila", 32, "humid"),
          ("Johannesburg", "Africa/Johannesburg", 23, "clear"),
          ("Vancouver", "America/Vancouver", 10, "rain"))
CITIES_PER_TRIP = 5
TRIP_ASKS = (
    "I am planning a trip to {}. For each city, what is the weather and what time is it there now?",
    "My colleagues are in {}. Check the weather and the local time in each city so I know when "
    "to call them.",
    "We ship orders to customers in {} today. Look up the weather and the local time in each "
    "of these cities.",
)


def trip(t: int) -> tuple[str, tuple]:
    """Trip t: the user's request and its cities in the order it names them."""
    cities = CITIES[CITIES_PER_TRIP * t:CITIES_PER_TRIP * (t + 1)]
    names = [c[0] for c in cities]
    return TRIP_ASKS[t % len(TRIP_ASKS)].format(", ".join(names[:-1]) + " and " + names[-1]), cities


def _tool(name: str, description: str, properties: dict) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": list(properties), "additionalProperties": False}}}


TOOLS = (
    _tool("get_weather", "Current weather in a city.",
          {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}),
    _tool("get_time", "Current local time in an IANA time zone.",
          {"timezone": {"type": "string"}}),
)


def _agent_history(t: int, turns: int) -> list[dict]:
    """The first `turns` scripted calls of trip t and their results (weather, then time,
    for each city in the order the user named them)."""
    order = trip(t)[1]
    messages = []
    for k in range(turns):
        city, zone, temp_c, sky = order[k // 2]
        if k % 2 == 0:
            name, args = "get_weather", {"city": city, "unit": "celsius"}
            result = {"city": city, "temperature_c": temp_c, "conditions": sky}
        else:
            name, args = "get_time", {"timezone": zone}
            result = {"timezone": zone, "local_time": f"{(9 + 3 * k) % 24:02d}:{(7 * k) % 60:02d}"}
        call_id = f"call_{t}_{k}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})
    return messages


@dataclass(frozen=True)
class Task:
    """One task: a pool of distinct request documents (without model and streaming fields),
    request i being docs[i] (cycling past the end: a repeat bench/spec_plan.py refuses)."""
    name: str
    min_requests: int                               # a measured run sends at least these
    docs: tuple[dict, ...] = ()
    doc_at: Callable[[int], dict] | None = None     # an endless pool instead (chat)

    @property
    def size(self) -> int | None:
        """How many distinct requests the pool has; None: endless."""
        return None if self.doc_at is not None else len(self.docs)

    def doc(self, i: int) -> dict:
        return self.doc_at(i) if self.doc_at is not None else self.docs[i % len(self.docs)]

    def body(self, i: int, model: str, foreign: bool = False) -> bytes:
        doc = dict(self.doc(i), model=model, stream=True, temperature=0,
                   stream_options={"include_usage": True})
        if foreign:
            doc.pop("prediction", None)             # llama-server: no predicted outputs
        return json.dumps(doc).encode()


def edit_doc(file: EditFile, change: str) -> dict:
    """The file first, the change last: smol-135m then starts its answer with the file
    (the other order, or a system prompt asking for the file, gets an explanation more often)."""
    fenced = f"```{file.fence}\n{file.text}```"
    user = f"Here is {file.name}:\n{fenced}\n\nRewrite the whole file with one change: {change}"
    return {"messages": [{"role": "user", "content": user}],
            "prediction": {"type": "content", "content": fenced},
            "max_tokens": EDIT_MAX_TOKENS}


def extract_doc(email: str) -> dict:
    return {"messages": [{"role": "system", "content": EXTRACT_SYSTEM},
                         {"role": "user", "content": email}],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "support_ticket", "strict": True, "schema": ticket_schema()}},
            "max_tokens": EXTRACT_MAX_TOKENS}


def agent_doc(t: int, turn: int) -> dict:
    return {"messages": [{"role": "system", "content": AGENT_SYSTEM},
                         {"role": "user", "content": trip(t)[0]}, *_agent_history(t, turn)],
            "tools": list(TOOLS), "tool_choice": "required", "max_tokens": AGENT_MAX_TOKENS}


def chat_doc(i: int) -> dict:
    return {"messages": [{"role": "user", "content": chat_prompt(i)}],
            "max_tokens": CHAT_MAX_TOKENS, "ignore_eos": True}


def tasks() -> dict[str, Task]:
    """The four tasks by name. Edits interleave the files (change c of every file, then
    change c + 1) so a few requests already cover every file; agent turns run in order. A
    run sends at least one request per file or e-mail, and a whole agent loop (10 turns)."""
    changes = len(FILES[0].changes)
    return {
        "edit": Task("edit", len(FILES), tuple(edit_doc(f, f.changes[c]) for c in range(changes) for f in FILES)),
        "extract": Task("extract", len(SCENARIOS),
                        tuple(extract_doc(support_email(k)) for k in range(EXTRACT_EMAILS))),
        "agent": Task("agent", AGENT_TURNS, tuple(agent_doc(t, turn) for t in range(AGENT_TRIPS)
                                                  for turn in range(AGENT_TURNS))),
        "chat": Task("chat", CHAT_MIN_REQUESTS, doc_at=chat_doc),
    }
