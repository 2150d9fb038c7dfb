"""The layers every janitor runs with: the ddbtx core and Powertools for AWS Lambda.

The core layer is ``shared/`` as it stands (``python/ddbtx/``): pure Python, so
no bundling step and no Docker. Powertools comes from the public layer AWS
publishes for Python 3.12 on arm64, resolved at deploy time from the public
SSM parameter for the exact version pinned in ``uv.lock`` (no lookup at synth).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from aws_cdk import IgnoreMode
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra import CACHE_EXCLUDES, SHARED_DIR

RUNTIME: Final = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE: Final = lambda_.Architecture.ARM_64

#: Must equal the aws-lambda-powertools version in uv.lock (a test checks it), so the
#: deployed functions run the Powertools the handlers were tested with.
POWERTOOLS_VERSION: Final = "3.37.0"
#: Public parameter AWS maintains for each Powertools release; its value is the layer ARN.
POWERTOOLS_PARAMETER: Final = (
    f"/aws/service/powertools/python/arm64/python3.12/{POWERTOOLS_VERSION}"
)

# gitignore syntax, relative to shared/: keep python/ddbtx/ and drop everything else.
_LAYER_IGNORE: Final = (
    "/*",
    "!/python",
    "/python/*",
    "!/python/ddbtx",
    # Tests never run inside Lambda, wherever someone puts them.
    "tests",
    "test_*.py",
    "conftest.py",
    *CACHE_EXCLUDES,
)


class JanitorLayers(Construct):
    """The core layer built from ``shared/`` and the public Powertools layer.

    Parameters
    ----------
    scope, construct_id
        Where the construct lives.
    powertools_layer_arn
        A Powertools layer version ARN to use instead of the SSM-published one
        (for partitions or regions where the public parameter does not exist).
    source
        The directory holding ``python/ddbtx/``; ``shared/`` unless a test says otherwise.

    Examples
    --------
    >>> layers = JanitorLayers(stack, "Layers")  # doctest: +SKIP
    >>> lambda_.Function(stack, "Fn", layers=layers.all, ...)  # doctest: +SKIP
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        powertools_layer_arn: str | None = None,
        source: Path = SHARED_DIR,
    ) -> None:
        super().__init__(scope, construct_id)
        self.core = lambda_.LayerVersion(
            self,
            "Core",
            code=lambda_.Code.from_asset(
                str(source), ignore_mode=IgnoreMode.GIT, exclude=list(_LAYER_IGNORE)
            ),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="ddbtx core package (python/ddbtx)",
        )
        arn = powertools_layer_arn or ssm.StringParameter.value_for_string_parameter(
            self, POWERTOOLS_PARAMETER
        )
        self.powertools = lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", arn)

    @property
    def all(self) -> Sequence[lambda_.ILayerVersion]:
        """Both layers (their files do not overlap: ``aws_lambda_powertools`` and ``ddbtx``)."""
        return [self.powertools, self.core]
