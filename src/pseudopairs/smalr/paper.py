"""The numbers paper 002 (Burns et al., SMALR) states, in one place, and the ones our copy of its
text does not show.

Our copy of the text lost the inline mathematics: Eq. (1)–(4) and most
symbols set in the text are blank. A value below is 002's only where the sentence that sets it is
readable; a value 002 sets in a blank symbol is ``None`` here, and each function of this package
takes it as an explicit argument, so the configuration that integrates SMALR has to choose it
(docs/smalr.md lists the choices and where they depart from 002).
"""

from __future__ import annotations

# §3.1 "PCA-reduced from 300-D to 50-D"; "projects them into a 512-D universal embedding space"
FASTTEXT_DIM = 300
PCA_DIM = 50
UNIVERSAL_DIM = 512
# §3.1 "Our experiments use a latent vocabulary size of 40K tokens" (also §4, Language-Agnostic)
LATENT_VOCABULARY = 40_000
# §3.2 "masking 20% of the words in the sentences worked best"
MASK_FRACTION = 0.2
# §3.3 Eq. (3): "where [λ] is a scalar parameter, which we set to 1.5" — the weight of the
# second direction of the bidirectional image–sentence triplet loss
IMAGE_SENTENCE_SECOND_DIRECTION = 1.5
# §3.3 Eq. (4): "scalar parameters that we set to (1e-4, 1e-6, 5e-2)"; the equation (which term
# each weighs) is blank in our copy — the order the text lists the losses in (§3.3) is
# neighbourhood constraints, language classifier, and MCLM is §3.2's; not asserted here
TOTAL_LOSS_WEIGHTS = (1e-4, 1e-6, 5e-2)
# §3.4 CLC-C: "two layers with input size [|L|] and 32 hidden layer units (i.e., it has 352
# learnable parameters)"; 352 = 10·32 + 32·1 for 002's ten languages: two weight matrices, no
# biases. "trained ... using the validation set for 30 iterations", no minibatches.
CLC_HIDDEN = 32
CLC_PARAMETERS_TEN_LANGUAGES = 352
CLC_ITERATIONS = 30

# Table 2 (c), Multi30K: mean recall per language (En, De, Fr, Cs) of its rows, read from the
# text and checked against the mR columns of Tables 7-10 (config/experiments.yaml, table_smalr2)
TABLE_2_MULTI30K = {
    "Language-Agnostic": {"en": 65.5, "de": 61.3, "fr": 59.9, "cs": 54.0},
    "HEM": {"en": 69.2, "de": 62.8, "fr": 63.3, "cs": 60.0},
    "SMALR": {"en": 69.6, "de": 64.7, "fr": 64.5, "cs": 61.1},
    "SMALR-CLC-A": {"en": 74.1, "de": 68.9, "fr": 65.2, "cs": 64.5},
    "SMALR-CLC-C": {"en": 74.5, "de": 69.8, "fr": 65.9, "cs": 64.8},
}

# Blank in our copy (set in a symbol the text lost); every function takes them as arguments.
TRIPLET_MARGIN = None          # §3.1 Eq. (1) "set m = _"
TRIPLET_TOP_K = None           # §3.1 "top-K most violated constraints, where K = _"
EXPLORATION_TOP = None         # §3.1 / §7.2 "randomly choose from the top _ scoring tokens"
EXPLORATION_PROBABILITY = None  # §3.1 / §7.2 "with probability _"
SPECIFIC_PER_LANGUAGE = None   # §3.1 "the top-_ most frequent words in each language"
PRETRAIN_LEARNING_RATE = None  # §4 "The learning rate was set to _ for the HEM and LA models"


def clc_c_parameters(languages: int, hidden: int = CLC_HIDDEN, *, bias: bool = False) -> int:
    """Learnable parameters of CLC-C's two-layer MLP (``languages`` scores in, one out):
    ``clc_c_parameters(10) == 352``, 002's count."""
    return languages * hidden + hidden + ((hidden + 1) if bias else 0)
