"""The editing task's files (bench/spec_bench.py, task "edit"): four small files written for
the benchmark, each 300-600 tokens with smol-135m's tokenizer (tests/bench/test_spec_tasks.py
counts them), and for each file ten one-line changes a user might ask for: forty distinct
requests, so a run of 32 (16 streams, two each) and its warm-up never send one twice.

A predicted output (`prediction` = the original file) is the draft for such a request: all
but one line of the answer repeats it. Kept apart from bench/spec_tasks.py so the texts do
not crowd out the code that turns them into requests. Fixed: changing a text changes what
earlier measurements mean.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EditFile:
    """A file to rewrite: its name (the language shows in the fence), text, and changes."""
    name: str
    fence: str                       # the Markdown code fence's language ("" for prose)
    text: str
    changes: tuple[str, ...]         # each asks for one line to change


RATE_LIMITER = '''\
"""A token-bucket rate limiter for outgoing API calls.

Each client key gets a bucket that refills at a steady rate; a call takes one token and
waits when the bucket is empty. Buckets idle for a long time are dropped.
"""
import threading
import time

DEFAULT_CAPACITY = 10
DEFAULT_REFILL_PER_S = 2.0
IDLE_DROP_S = 300.0


class Bucket:
    def __init__(self, capacity, refill_per_s, now):
        self.capacity = capacity
        self.refill_per_s = refill_per_s
        self.tokens = float(capacity)
        self.updated = now

    def refill(self, now):
        elapsed = now - self.updated
        self.tokens = min(self.capacity, self.tokens + elapsed * self.refill_per_s)
        self.updated = now

    def wait_time(self):
        if self.tokens >= 1.0:
            return 0.0
        return (1.0 - self.tokens) / self.refill_per_s


class RateLimiter:
    def __init__(self, capacity=DEFAULT_CAPACITY, refill_per_s=DEFAULT_REFILL_PER_S,
                 clock=time.monotonic):
        self.capacity = capacity
        self.refill_per_s = refill_per_s
        self.clock = clock
        self.buckets = {}
        self.lock = threading.Lock()

    def acquire(self, key):
        """Take one token for `key`, sleeping until one is available."""
        while True:
            with self.lock:
                now = self.clock()
                bucket = self.buckets.get(key)
                if bucket is None:
                    bucket = Bucket(self.capacity, self.refill_per_s, now)
                    self.buckets[key] = bucket
                bucket.refill(now)
                delay = bucket.wait_time()
                if delay == 0.0:
                    bucket.tokens -= 1.0
                    return
            time.sleep(delay)

    def drop_idle(self):
        """Forget buckets that have not been used for IDLE_DROP_S seconds."""
        with self.lock:
            now = self.clock()
            stale = [k for k, b in self.buckets.items() if now - b.updated > IDLE_DROP_S]
            for key in stale:
                del self.buckets[key]
            return len(stale)
'''

CART = '''\
// Shopping cart totals for the checkout page.
const TAX_RATE = 0.2;
const FREE_SHIPPING_FROM = 50;
const SHIPPING_FEE = 4.95;

function lineTotal(item) {
  return item.price * item.quantity;
}

function subtotal(items) {
  return items.reduce((sum, item) => sum + lineTotal(item), 0);
}

function discountFor(code, amount) {
  if (!code) {
    return 0;
  }
  if (code === "WELCOME10") {
    return amount * 0.1;
  }
  if (code === "FIVEOFF" && amount >= 25) {
    return 5;
  }
  return 0;
}

function shippingFor(amount) {
  return amount >= FREE_SHIPPING_FROM ? 0 : SHIPPING_FEE;
}

function roundCents(value) {
  return Math.round(value * 100) / 100;
}

export function cartTotals(items, code) {
  const before = subtotal(items);
  const discount = discountFor(code, before);
  const taxable = before - discount;
  const tax = taxable * TAX_RATE;
  const shipping = shippingFor(taxable);
  return {
    subtotal: roundCents(before),
    discount: roundCents(discount),
    tax: roundCents(tax),
    shipping: roundCents(shipping),
    total: roundCents(taxable + tax + shipping),
  };
}

export function describeCart(items) {
  const count = items.reduce((n, item) => n + item.quantity, 0);
  if (count === 0) {
    return "Your cart is empty.";
  }
  const noun = count === 1 ? "item" : "items";
  return `You have ${count} ${noun} in your cart.`;
}
'''

NOTICE = '''\
Dear residents of Linden Court,

From Monday 14 April the building will have its annual maintenance week. The work is
planned so that each of you loses water or power for as short a time as possible, but some
interruptions cannot be avoided, and we would like you to know about them in advance.

On Monday the water will be turned off between 9:00 and 13:00 while the plumbers replace
the main valves in the basement. Please fill a few bottles the evening before if you need
water during the morning.

On Tuesday and Wednesday the lifts will be serviced one at a time, so one lift will always
be working. The stairwell lights on floors three to six will also be replaced on Tuesday
afternoon.

On Thursday the electricity will be switched off from 10:00 to 11:30 for the inspection of
the main panel. Fridges and freezers stay cold for that long if you keep their doors shut.

On Friday the cleaners will wash the entrance hall and the windows of the stairwells. The
front door will stay open from 8:00 to 12:00, so please do not leave bicycles or parcels in
the hall that morning.

The bicycle room in the courtyard will be closed all week while its roof is repaired. You
can leave bicycles in the garage, on the left side near the ramp, until Sunday 20 April.

If anyone in your flat depends on powered medical equipment, or cannot use the stairs,
please tell the caretaker before Friday 11 April so that we can plan around you.

Thank you for your patience. Questions can go to the caretaker, Mr. Adeyemi, on 020 7946
0321 or at the office next to the garage, open every weekday from 8:00 to 10:00.

Kind regards,
The Linden Court residents' committee
'''

DEPLOY = '''\
# Deployment settings for the orders service (staging and production).
service:
  name: orders
  image: registry.example.com/shop/orders
  tag: "2.14.3"
  replicas: 3
  port: 8080
  log_level: info

resources:
  requests:
    cpu: "250m"
    memory: "256Mi"
  limits:
    cpu: "1"
    memory: "512Mi"

database:
  host: orders-db.internal
  port: 5432
  name: orders
  pool_size: 20
  connect_timeout_s: 5
  statement_timeout_ms: 3000

cache:
  host: redis.internal
  port: 6379
  ttl_s: 600

queues:
  payments:
    url: amqp://mq.internal/payments
    prefetch: 10
    retry_limit: 5
  emails:
    url: amqp://mq.internal/emails
    prefetch: 50
    retry_limit: 3

health:
  liveness_path: /livez
  readiness_path: /readyz
  period_s: 10
  failure_threshold: 3

features:
  gift_cards: true
  express_checkout: false
  new_invoice_layout: false
  order_tracking: true

environments:
  staging:
    replicas: 1
    log_level: debug
    database_host: orders-db.staging.internal
  production:
    replicas: 6
    log_level: warn
    database_host: orders-db.prod.internal
'''

FILES: tuple[EditFile, ...] = (
    EditFile("rate_limiter.py", "python", RATE_LIMITER, (
        "Change DEFAULT_CAPACITY from 10 to 20.",
        "Change IDLE_DROP_S from 300.0 to 600.0.",
        "Change DEFAULT_REFILL_PER_S from 2.0 to 5.0.",
        "In Bucket.wait_time, return 0.0 when self.tokens >= 0.5 instead of 1.0.",
        "Use time.perf_counter instead of time.monotonic as RateLimiter's default clock.",
        "In Bucket.refill, cap the tokens at self.capacity * 2 instead of self.capacity.",
        "Make drop_idle compare with >= instead of > against IDLE_DROP_S.",
        'Change the docstring of acquire to "Take one token for `key`, waiting until one is free."',
        "In Bucket.__init__, start with zero tokens instead of a full bucket.",
        'Change the first docstring line to "A token-bucket rate limiter for outgoing HTTP requests."')),
    EditFile("cart.js", "javascript", CART, (
        "Change TAX_RATE from 0.2 to 0.25.",
        "Change FREE_SHIPPING_FROM from 50 to 75.",
        "Make SHIPPING_FEE 5.95 instead of 4.95.",
        'Change the empty-cart message to "Your cart has no items yet.".',
        'Change the discount of the code "WELCOME10" from 10% to 15%.',
        'Make the "FIVEOFF" code require an amount of at least 30 instead of 25.',
        "Round with Math.floor instead of Math.round in roundCents.",
        'Change the first comment to "// Cart totals for the checkout and the order summary."',
        'In describeCart, say "article" instead of "item" for a single item.',
        "Compute the tax from the amount before the discount (before) instead of taxable.")),
    EditFile("notice.txt", "", NOTICE, (
        "Change the office hours to 8:00 to 11:00.",
        "Move the electricity cut on Thursday to 14:00 to 15:30.",
        "Say that bicycles can stay in the garage until Sunday 27 April instead of 20 April.",
        "Sign the letter from the Linden Court management office instead of the residents' committee.",
        "Change the caretaker's phone number to 020 7946 0999.",
        "Start the maintenance week on Monday 21 April instead of Monday 14 April.",
        "Say that the water will be off on Monday from 9:00 to 12:00 instead of 13:00.",
        "Change the caretaker's name from Mr. Adeyemi to Ms. Okonkwo.",
        "Keep the front door open on Friday from 8:00 to 13:00 instead of 12:00.",
        'Change the greeting to "Dear neighbours,".')),
    EditFile("deploy.yaml", "yaml", DEPLOY, (
        'Change the image tag from "2.14.3" to "2.15.0".',
        "Set production replicas to 8.",
        "Turn the express_checkout feature on.",
        "Raise the database pool_size from 20 to 40.",
        "Change the service port from 8080 to 9090.",
        "Set the service's log_level to debug.",
        "Change the cache ttl_s from 600 to 1200.",
        "Lower the payments queue retry_limit from 5 to 3.",
        'Raise the memory limit from "512Mi" to "1Gi".',
        "Turn the new_invoice_layout feature on.")),
)
