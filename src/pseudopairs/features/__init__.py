"""The features stage (paper §3.1): ResNet average-pool features of every image of
an image list — the network and preprocessing (:mod:`~pseudopairs.features.network`), resumable
shards (:mod:`~pseudopairs.features.shards`) and the ``features`` step
(:mod:`~pseudopairs.features.extract`); settings in :mod:`~pseudopairs.features.settings`."""
