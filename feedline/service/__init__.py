"""Distributed preprocessing on Ray: when one host cannot keep up.

``ds.apply(fl.service.distribute(mode, service))`` runs the pipeline so far on a service's
workers (Ray actors) and streams its output to this consumer: :mod:`.client` (the stage),
:mod:`.dispatcher` (jobs, splits, autoscaling, its journal), :mod:`.worker` (running parts of
pipelines), :mod:`.cluster` (:class:`LocalCluster`, connecting to a Ray address). Ray is an
optional extra (``pip install 'feedline[service]'``), imported only when a service is used.
"""

from feedline.service.client import distribute
from feedline.service.cluster import LocalCluster

__all__ = ["LocalCluster", "distribute"]
