import bpy
settings = bpy.context.scene.snowfall

settings.snowfall_rate = 20.0
settings.snow_depth = 0.05
settings.snowfall_mode = 'DEPTH'
settings.snow_type = 'dry'
settings.wind_speed = 3.0
settings.gust_strength = 0.3
settings.gust_period = 3.0
settings.gust_direction_jitter = 0.261799
settings.drift_enabled = True
settings.drift_strength = 1.0
settings.turbulence = 1.0
settings.substeps = 1
settings.upwind_fetch = 'open_snowfield'
