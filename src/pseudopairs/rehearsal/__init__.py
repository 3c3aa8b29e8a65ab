"""The rehearsal of the paper configuration at the paper's size, offline (config/rehearsal.yaml,
docs/scale.md): :mod:`.data` makes inputs at the real counts where the real ones cannot be had
here (Flickr30K image files, the Karpathy COCO JSON and the COCO image archives; Multi30K's real
text comes from a local mirror through the real download rule), :mod:`.summary` turns the rules'
``benchmark:`` files into ``results/rehearsal.csv``."""
