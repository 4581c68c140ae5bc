from django.db import models


class Order(models.Model):
    idempotency_key = models.TextField(null=True)
    tenant = models.TextField(null=True)
    sku = models.TextField(null=True)

    class Meta:
        db_table = "orders"
        managed = False
