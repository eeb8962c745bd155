"""The ``spark`` resource every model asset uses: one lazily started session per process."""
from typing import Any, Optional

from dagster_pyspark import LazyPySparkResource
from pydantic import PrivateAttr

from incremental_assets.load.settings import load_settings
from incremental_assets.model.settings import Settings, is_secret, redact_url
from incremental_assets.spark.connect_server import spark_remote
from incremental_assets.spark.session import build_spark_session


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy session resource, extended with Spark Connect (``remote``).

    The session is created on first use and shared by every asset of the process, so a run over many
    intervals or models pays Spark's start-up once; with the project's Spark Connect server up
    (``incremental-assets spark start``) it pays none.
    """

    remote: Optional[str] = None
    # Credentials (settings whose names look secret, a Connect URL's token) are not part of the
    # resource's config, which Dagster stores and shows: they are read from the project's settings
    # (the environment, or its settings file) when the session starts.
    project_dir: Optional[str] = None
    _session: Any = PrivateAttr(default=None)

    def _init_session(self) -> None:
        if self._spark_session is None:
            conf, remote = dict(self.spark_config), self.remote
            if self.project_dir:
                settings = load_settings(self.project_dir)
                conf.update({k: v for k, v in settings.spark_config().items() if is_secret(k)})
                # The project's running Spark Connect server, when no remote is configured (checked when
                # the session starts, so a server started after `dagster dev` is used by the next run).
                remote = spark_remote(settings)
            self._spark_session = build_spark_session(conf, remote=remote)

    @classmethod
    def from_settings(cls, settings: Settings) -> "SparkResource":
        public = {k: v for k, v in settings.spark_config().items() if not is_secret(k)}
        return cls(spark_config=public, remote=redact_url(settings.spark_remote), project_dir=str(settings.project_dir))
