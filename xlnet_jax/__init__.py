"""xlnet-jax: XLNet pretraining in JAX/Flax."""
