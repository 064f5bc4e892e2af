"""Publish (with `publish.url`): the finished, verified Shar sets and hand-off files to object storage.

The stages keep writing to the working folder; one job after verification uploads what is missing
or changed and writes a record last (publish.job); files and objects are compared by the ETag a
file's bytes give (publish.objects).
"""

from sharflow.core.exports import lazy_exports

__all__ = ["PublishSettings", "publish", "published_files"]
__getattr__ = lazy_exports(__name__, {"PublishSettings": "job", "publish": "job", "published_files": "job"})
