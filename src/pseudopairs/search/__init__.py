"""The search stage: a trained model as the product. ``export`` writes a self-contained model
folder, :func:`pseudopairs.load` reads it back (``encode_texts`` / ``encode_images``), ``index``
embeds a collection, ``search`` and ``serve`` query it."""
