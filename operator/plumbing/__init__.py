"""The I/O every controller shares: the one write path to the API (`kube`), the API client (`client`),
the informer cache (`store`), the work queue (`workqueue`), Events (`events`), reading opted-in Secrets
(`secrets`), leadership among replicas (`leadership`) and the operator's own metrics (`metrics`)."""
