import bpy
settings = bpy.context.scene.snowfall

settings.snowfall_rate = 60.0
settings.snow_depth = 0.1
settings.snowfall_mode = 'DEPTH'
settings.snow_type = 'dry'
settings.wind_speed = 11.0
settings.gust_strength = 0.2
settings.gust_period = 2.0
settings.gust_direction_jitter = 0.087266
settings.drift_enabled = True
settings.drift_strength = 1.0
settings.turbulence = 1.0
settings.substeps = 2
settings.upwind_fetch = 'open_snowfield'
