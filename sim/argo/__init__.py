"""An Argo Workflows simulator: a controller driving Workflows in a `ClusterStore` through
phases, nodes and pods (`controller`, `engine`, `groups`, `pods`), the Argo server routes behind
the Kubernetes service proxy (`server`, `actions`, `lint`), log archival (`archive`) and sample
load (`samples`). Dev and test only."""

from sim.argo.controller import ArgoSimulator
from sim.argo.server import ArgoServer

__all__ = ["ArgoServer", "ArgoSimulator"]
