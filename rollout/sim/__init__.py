"""The simulated farm: `trajforge.world` rendered with Pillow and served as environments."""
