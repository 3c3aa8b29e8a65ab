"""Raw data to prepared caption tables: downloads (verified, resumable), the Multi30K and COCO
readers, Moses text preparation, and the vocabulary of a training run."""
