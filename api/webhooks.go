package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/webhook"
)

// mustWebhooks is the webhooks of a server built without them: their
// reads work, and the creation of a subscription says that no key is set.
func mustWebhooks(cfg Config) *webhook.Service {
	s, err := webhook.New(cfg.Pool, webhook.Config{}, cfg.Logger, cfg.Metrics)
	if err != nil {
		panic(err) // without a key, New has nothing that can fail
	}
	return s
}

// createWebhook is POST /admin/webhooks: a new subscription, answered
// with its signing secret, which is never shown again.
func (h *handlers) createWebhook(c echo.Context) error {
	var req webhook.NewSubscription
	if err := readJSON(c, &req, `{"url": "https://...", "event_types": ["batch.done"], "batch_id": "...", "description": "..."}`); err != nil {
		return err
	}
	h.logAdmin(c, "webhook create")
	sub, err := h.webhooks.Create(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, sub)
}

// webhookList is the answer of GET /admin/webhooks.
type webhookList struct {
	Subscriptions []webhook.Subscription `json:"subscriptions"`
	// EventTypes are the event types a subscription may name.
	EventTypes []string `json:"event_types"`
}

// listWebhooks is GET /admin/webhooks: every subscription, oldest first.
func (h *handlers) listWebhooks(c echo.Context) error {
	subs, err := h.webhooks.List(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, webhookList{Subscriptions: subs, EventTypes: webhook.EventTypes()})
}

// getWebhook is GET /admin/webhooks/:subscriptionId.
func (h *handlers) getWebhook(c echo.Context) error {
	sub, err := h.webhooks.Get(c.Request().Context(), c.Param("subscriptionId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sub)
}

// deleteWebhook is DELETE /admin/webhooks/:subscriptionId: the
// subscription goes, with its deliveries.
func (h *handlers) deleteWebhook(c echo.Context) error {
	h.logAdmin(c, "webhook delete")
	if err := h.webhooks.Delete(c.Request().Context(), c.Param("subscriptionId")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// enableWebhook is POST /admin/webhooks/:subscriptionId/enable.
func (h *handlers) enableWebhook(c echo.Context) error {
	h.logAdmin(c, "webhook enable")
	sub, err := h.webhooks.SetEnabled(c.Request().Context(), c.Param("subscriptionId"), true, "")
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sub)
}

// disableWebhook is POST /admin/webhooks/:subscriptionId/disable, with an
// optional {"reason": "..."}.
func (h *handlers) disableWebhook(c echo.Context) error {
	var req struct {
		Reason string `json:"reason"`
	}
	if err := readJSON(c, &req, `{"reason": "..."}`); err != nil {
		return err
	}
	h.logAdmin(c, "webhook disable")
	sub, err := h.webhooks.SetEnabled(c.Request().Context(), c.Param("subscriptionId"), false, req.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sub)
}

// deliveryList is the answer of GET /admin/webhooks/:subscriptionId/deliveries.
type deliveryList struct {
	Deliveries []webhook.Delivery `json:"deliveries"`
}

// listWebhookDeliveries is GET /admin/webhooks/:subscriptionId/deliveries:
// the last deliveries (?limit=, at most 200), newest first, of a ?status=
// if given.
func (h *handlers) listWebhookDeliveries(c echo.Context) error {
	limit := 0
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return &problem.InputError{Msg: "limit must be a positive integer, got " + strconv.Quote(v)}
		}
		limit = n
	}
	ds, err := h.webhooks.Deliveries(c.Request().Context(), c.Param("subscriptionId"), c.QueryParam("status"), limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, deliveryList{Deliveries: ds})
}

// getWebhookDelivery is GET /admin/webhooks/deliveries/:deliveryId: the
// delivery with its payload and attempts.
func (h *handlers) getWebhookDelivery(c echo.Context) error {
	d, err := h.webhooks.Delivery(c.Request().Context(), c.Param("deliveryId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

// replayWebhookDelivery is POST /admin/webhooks/deliveries/:deliveryId/replay:
// the delivery is sent again, with its webhook-id.
func (h *handlers) replayWebhookDelivery(c echo.Context) error {
	h.logAdmin(c, "webhook replay")
	d, err := h.webhooks.Replay(c.Request().Context(), h.river, c.Param("deliveryId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, d)
}

// readJSON decodes the request's JSON object into v, refusing unknown
// fields; an empty body leaves v as it is. shape is the object expected,
// for the error.
func readJSON(c echo.Context, v any, shape string) error {
	body, err := readBody(c)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &problem.InputError{Msg: "invalid request: the body must be a JSON object " + shape + ": " + err.Error()}
	}
	return nil
}
