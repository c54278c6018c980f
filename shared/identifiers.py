"""The shapes of the identifiers every deployable checks: one definition of each, so the
apiserver's routes and OpenAPI document, the compiler's internal API and provisioning, and the
cluster registry's parser cannot drift apart. Constants only; purely computational."""

from __future__ import annotations

import re
from typing import Final

# A tenant id becomes part of Kubernetes names (kubeopera-data-<tenant>, 63 characters at
# most) and of IAM user names: a DNS-1123 label of at most 48 characters.
TENANT_ID_PATTERN: Final = r"^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$"
TENANT_ID: Final = re.compile(TENANT_ID_PATTERN)
# Pipeline ids are ours (lower-case hexadecimal today); 40 characters leave room.
PIPELINE_ID_PATTERN: Final = r"^[a-z0-9]{1,40}$"
PIPELINE_ID: Final = re.compile(PIPELINE_ID_PATTERN)
# A pipeline's trigger: a DNS label short enough for the labels, paths and keys it becomes.
TRIGGER_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$"
TRIGGER_NAME: Final = re.compile(TRIGGER_NAME_PATTERN)
# Cluster ids are the registry's (or host-<kube-system uid>): DNS-like, case kept.
CLUSTER_ID_PATTERN: Final = r"^[A-Za-z0-9]([-A-Za-z0-9._:]{0,251}[A-Za-z0-9])?$"
CLUSTER_ID: Final = re.compile(CLUSTER_ID_PATTERN)
# Kubernetes names: a namespace is a DNS-1123 label, most other objects a DNS-1123 subdomain.
DNS_LABEL_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A tenant's data secret (a Kubernetes Secret in its namespace) and one of its keys, as a
# pipeline references them (wizard steps' ``from_secret``, notification channels). Names
# starting with RESERVED_SECRET_PREFIX are the platform's own Secrets, never a tenant's.
DATA_SECRET_NAME_PATTERN: Final = r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$"
DATA_SECRET_KEY_PATTERN: Final = r"^[-._A-Za-z0-9]{1,253}$"
RESERVED_SECRET_PREFIX: Final = "kubeopera-"
