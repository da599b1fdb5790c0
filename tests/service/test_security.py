"""Who can use a service: the Ray version feedline needs, the warning when token
authentication is off, and the loopback-only start of a LocalCluster's Ray (no cluster
starts here; tests/service/test_service.py checks a real one's sockets)."""

import logging
import types

import pytest

from feedline.core.errors import ServiceError
from feedline.service import cluster, ray_support

ray = pytest.importorskip("ray")


@pytest.mark.parametrize("version", ["2.9.3", "2.51.1", "1.13.0"])
def test_a_ray_without_token_authentication_is_refused(version, monkeypatch):
    with pytest.raises(ImportError, match=rf"feedline.service needs Ray >= 2.52, the first "
                                          rf"with token authentication .*found ray {version}"):
        ray_support.check_ray_version(version)
    monkeypatch.setattr(ray, "__version__", version)
    with pytest.raises(ImportError, match="pip install -U 'feedline\\[service\\]'"):
        ray_support.import_ray()


@pytest.mark.parametrize("version", ["2.52.0", "2.60.0", "3.0.0.dev0"])
def test_a_ray_with_token_authentication_is_used(version):
    ray_support.check_ray_version(version)


@pytest.mark.parametrize("enabled", [False, True])
def test_a_cluster_without_token_authentication_is_warned_about(enabled, monkeypatch, caplog):
    monkeypatch.setattr(ray_support, "token_authentication", lambda: enabled)
    with caplog.at_level(logging.WARNING, logger="feedline.service"):
        warned = ray_support.warn_if_unauthenticated("the Ray cluster at 'auto'")
    messages = [r.getMessage() for r in caplog.records if r.name == "feedline.service"]
    assert warned is not enabled
    if enabled:
        assert messages == []
    else:
        assert len(messages) == 1
        assert messages[0].startswith(
            "the Ray cluster at 'auto' runs without Ray's token authentication: anyone who "
            "can reach its ports can run code on it, as this user. Set RAY_AUTH_MODE=token")


def _fake_ray(address):
    """A ``ray`` that records how it was started and then says it runs on ``address``."""
    from ray._private import ray_constants

    calls = []
    fake = types.SimpleNamespace(__version__="2.60.0", util=types.SimpleNamespace())
    fake.init = lambda **settings: calls.append(
        ("init", settings, ray_constants.ENABLE_RAY_CLUSTER))
    fake.shutdown = lambda: calls.append(("shutdown",))
    fake.util.get_node_ip_address = lambda: address
    return fake, calls


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_a_local_clusters_ray_is_started_on_the_loopback_address(address):
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    fake, calls = _fake_ray(address)
    cluster._start_ray(fake, num_cpus=2)
    # Ray keeps a loopback node address only while it keeps clusters to one machine.
    assert calls == [("init", {"_node_ip_address": "127.0.0.1", "num_cpus": 2}, False)]
    assert ray_constants.ENABLE_RAY_CLUSTER == before


def test_a_ray_that_would_listen_on_the_network_is_shut_down_and_refused():
    fake, calls = _fake_ray("192.0.2.7")
    with pytest.raises(ServiceError, match="Ray 2.60.0 started on 192.0.2.7, not on the "
                                           "loopback interface: a LocalCluster would listen "
                                           "on the network"):
        cluster._start_ray(fake)
    assert [call[0] for call in calls] == ["init", "shutdown"]


def test_a_dispatcher_that_is_gone_says_why():
    error = ray.exceptions.RayActorError(
        error_msg="The actor died unexpectedly before finishing this task.\n\tpid: 7\n"
                  "The actor is dead because it was killed by `ray.kill`.")
    assert str(cluster.dispatcher_error(error)) == (
        "the service's dispatcher is gone (RayActorError: The actor died unexpectedly "
        "before finishing this task. The actor is dead because it was killed by "
        "`ray.kill`.); was the service shut down?")
