"""Wire-level fakes of the services the gateway talks to, served by aiohttp on 127.0.0.1."""
