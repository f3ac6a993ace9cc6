"""Run folders on disk: one per cell, its meta.json, who may read it, sharing."""
