import bpy
settings = bpy.context.scene.snowfall

settings.snowfall_rate = 40.0
settings.snow_depth = 0.15
settings.snowfall_mode = 'DEPTH'
settings.snow_type = 'wet'
settings.wind_speed = 4.0
settings.gust_strength = 0.2
settings.gust_period = 3.0
settings.gust_direction_jitter = 0.174533
settings.drift_enabled = True
settings.drift_strength = 1.0
settings.turbulence = 1.0
settings.substeps = 1
settings.upwind_fetch = 'open_snowfield'
