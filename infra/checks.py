"""Written reasons for the findings of template checkers that are not ours (checkov).

cdk-nag findings are acknowledged next to their construct (``Validations.of(...)``);
checkov reads its suppressions from the template itself, from a resource's
``Metadata.checkov.skip`` list, each with a ``comment``. :func:`skip_checkov` writes
one there, next to the construct it concerns, so that ``make check-template`` fails on
any finding that has no written reason.
"""

from __future__ import annotations

from aws_cdk import CfnResource
from constructs import IConstruct


def skip_checkov(construct: IConstruct, check_id: str, reason: str) -> None:
    """Suppress checkov's ``check_id`` on ``construct``'s CloudFormation resource.

    Parameters
    ----------
    construct
        An L2 construct (its default child is used) or a ``CfnResource``.
    check_id
        The check, e.g. ``"CKV_AWS_117"``.
    reason
        Why the finding does not apply or is accepted; written into the template.

    Raises
    ------
    ValueError
        ``reason`` is empty, or ``construct`` has no CloudFormation resource.
    """
    if not reason.strip():
        raise ValueError(f"a checkov suppression of {check_id} needs a written reason")
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise ValueError(f"{construct.node.path} has no CloudFormation resource to annotate")
    metadata = resource.get_metadata("checkov") or {"skip": []}
    metadata["skip"] = [*metadata["skip"], {"id": check_id, "comment": reason}]
    resource.add_metadata("checkov", metadata)
