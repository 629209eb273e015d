"""What a group launches now: the other side of drift (``decision/drift.py``, docs/node_lifecycle.md,
"Drift").

An instance's side is read with the instance (``ec2_instances.instance_from_ec2``): EC2 tags every
instance launched from a launch template with ``aws:ec2launchtemplate:id`` and
``aws:ec2launchtemplate:version`` (the version number the launch resolved, whatever ``$Latest`` or
``$Default`` meant then), and ``DescribeInstances`` gives its ``ImageId``.

A group's side: the launch template it names (an Auto Scaling group's ``LaunchTemplate`` or its
mixed instances policy's ``LaunchTemplateSpecification``, a Spot Fleet's single
``LaunchTemplateConfigs`` entry), its version resolved by ``DescribeLaunchTemplateVersions`` (one
call per group and read, made only for pools that look for drift, or to size a group's unit), and
that version's ``ImageId``; without a template, the launch configuration's or the launch
specifications' image. A launch is written ``lt-0abc:3``; "" is "not known", never drift.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from clusterman.cloud.aws_calls import cloud_call


@dataclass(frozen=True)
class Launch:
    """A launch template version (``lt-0abc:3``), a machine image (``ami-0abc``) and the instance
    type the template or configuration names; each "" when not known."""

    template: str = ""
    image_id: str = ""
    instance_type: str = ""


UNKNOWN = Launch()


def of_template(ec2: Any, label: str, spec: dict[str, Any]) -> Launch:
    """The version a launch template specification launches now (``Version``: a number, ``$Latest``
    or ``$Default``, the default), with its image and instance type."""
    ref = {"LaunchTemplateId": spec["LaunchTemplateId"]} if spec.get("LaunchTemplateId") else {}
    ref = ref or {"LaunchTemplateName": spec.get("LaunchTemplateName", "")}
    version = str(spec.get("Version") or "$Default")
    with cloud_call(label, "DescribeLaunchTemplateVersions"):
        versions = ec2.describe_launch_template_versions(**ref, Versions=[version])["LaunchTemplateVersions"]
    if not versions:
        return UNKNOWN
    v = versions[0]
    data = v.get("LaunchTemplateData") or {}
    template = f"{v['LaunchTemplateId']}:{v['VersionNumber']}"
    return Launch(template, str(data.get("ImageId") or ""), str(data.get("InstanceType") or ""))


def of_images(images: Iterable[str]) -> Launch:
    """Launch specifications without a template: their image, when they all name the same one."""
    found = {i for i in images if i}
    return Launch(image_id=found.pop()) if len(found) == 1 else UNKNOWN
