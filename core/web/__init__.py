"""What every web page stands on, whichever package renders it: the request's services and database session
(services.py), browser sessions and CSRF (sessions.py), the pages' security headers (headers.py). Only the web
process loads this package; the worker never does."""
