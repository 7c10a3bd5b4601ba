"""The learned placers, each a faithful reproduction of its paper measured against strong baselines, one
readable file each: :mod:`~autoplace.placers.learned.rl` (Mirhoseini et al. 2017: seq2seq + REINFORCE),
:mod:`~autoplace.placers.learned.hdp` (Mirhoseini et al. 2018: a grouper and a placer),
:mod:`~autoplace.placers.learned.gdp` (Zhou et al.: GraphSAGE + Transformer-XL + PPO, across graphs) and
:mod:`~autoplace.placers.learned.htf_mpr` (Albaqsami et al.: a genetic algorithm screened by the fitness
predictor of :mod:`~autoplace.placers.learned.predictor`). They run on the search loop and the policy layers
they share (:mod:`autoplace.search`, :mod:`autoplace.policies`).
"""
