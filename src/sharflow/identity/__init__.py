"""Stage 1c, identity (with splits): held out means held out, by content and not by name.

identity_part jobs (per dataset, in parts after the text stage) fingerprint every record's sound
(identity.fingerprint: landmark hashes of spectral peak pairs) and key it (identity.keys: its span,
its speaker and text); over all datasets (identity.links), an index job indexes the held-out
records, check parts link each train record that is a held-out record again (the same span, the
same sound, the same speaker and text) to it, and their merge writes the links; each dataset's
splits job rejects the linked train records with the link's reason.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["link_identities", "run_identity_part"]
__getattr__ = lazy_exports(__name__, {"run_identity_part": "part", "link_identities": "links"})
