"""ultimat3.http: the outbound address guard (``is_public_address``, ``safe_client``), webhook
signatures (``verify_webhook_signature``, ``verify_body_hmac``, Standard Webhooks signing), the
ASGI app serving webhook receivers (``webhook_app``), the rate limiter and ``XErrorMiddleware``.

Built over httpx; no web framework. It imports nothing from ``ultimat3.jobs``."""

from ultimat3.core import (
    DEFAULT_WEBHOOK_TOLERANCE_SECONDS,
    WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TOPIC_HEADER,
    VerifiedWebhook,
    sign_webhook,
    verify_webhook_signature,
)

from ._address import NON_PUBLIC_NETWORKS, embedded_ipv4, is_public_address
from ._app import RECEIVER_RETRY_AFTER_SECONDS, WebhookApp, webhook_app
from ._guard import GuardedTransport, Resolver, safe_client, system_resolver
from ._hmac import VerifiedBody, verify_body_hmac
from ._inbound import DEFAULT_WEBHOOK_BODY_LIMIT, Inbound, WebhookRoute, path_problem
from ._middleware import XErrorMiddleware
from ._ratelimit import (
    MemoryRateLimitStore,
    RateDecision,
    RateLimiter,
    RateLimitStore,
    memory_rate_limit_store,
    rate_limiter,
)
from ._ratelimit_shared import (
    PostgresRateLimitStore,
    RedisRateLimitStore,
    postgres_rate_limit_store,
    redis_rate_limit_store,
)
from ._standard_webhooks import (
    STANDARD_WEBHOOK_ID_HEADER,
    STANDARD_WEBHOOK_SIGNATURE_HEADER,
    STANDARD_WEBHOOK_TIMESTAMP_HEADER,
    sign_standard_webhook,
    standard_webhook_key,
)

__all__ = [
    "DEFAULT_WEBHOOK_BODY_LIMIT",
    "DEFAULT_WEBHOOK_TOLERANCE_SECONDS",
    "NON_PUBLIC_NETWORKS",
    "RECEIVER_RETRY_AFTER_SECONDS",
    "STANDARD_WEBHOOK_ID_HEADER",
    "STANDARD_WEBHOOK_SIGNATURE_HEADER",
    "STANDARD_WEBHOOK_TIMESTAMP_HEADER",
    "WEBHOOK_ID_HEADER",
    "WEBHOOK_SIGNATURE_HEADER",
    "WEBHOOK_TOPIC_HEADER",
    "GuardedTransport",
    "Inbound",
    "MemoryRateLimitStore",
    "PostgresRateLimitStore",
    "RateDecision",
    "RateLimitStore",
    "RateLimiter",
    "RedisRateLimitStore",
    "Resolver",
    "VerifiedBody",
    "VerifiedWebhook",
    "WebhookApp",
    "WebhookRoute",
    "XErrorMiddleware",
    "embedded_ipv4",
    "is_public_address",
    "memory_rate_limit_store",
    "path_problem",
    "postgres_rate_limit_store",
    "rate_limiter",
    "redis_rate_limit_store",
    "safe_client",
    "sign_standard_webhook",
    "sign_webhook",
    "standard_webhook_key",
    "system_resolver",
    "verify_body_hmac",
    "verify_webhook_signature",
    "webhook_app",
]
