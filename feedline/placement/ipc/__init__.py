"""The transport under every placement: worker interpreters (:mod:`.spawn`) and the duplex
channel whose NumPy payloads cross through shared memory (:mod:`.transport`). Nothing here
knows about datasets."""
