import bpy
settings = bpy.context.scene.snowfall

settings.snowfall_rate = 120.0
settings.snow_depth = 0.25
settings.snowfall_mode = 'DEPTH'
settings.snow_type = 'dry'
settings.wind_speed = 18.0
settings.gust_strength = 0.4
settings.gust_period = 1.5
settings.gust_direction_jitter = 0.261799
settings.drift_enabled = True
settings.drift_strength = 1.0
settings.turbulence = 1.0
settings.substeps = 2
settings.upwind_fetch = 'wrap'
