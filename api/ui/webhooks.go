package ui

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/webhook"
)

// webhookDeliveriesShown is how many deliveries a subscription's page
// lists.
const webhookDeliveriesShown = 50

// mountUIWebhooks registers the webhooks' pages: the subscriptions, one
// subscription's deliveries, one delivery's attempts, and their buttons.
func (d *Dashboard) mountUIWebhooks(g *echo.Group) {
	g.GET("/webhooks", d.uiWebhooks)
	g.GET("/webhooks/deliveries/:deliveryId", d.uiWebhookDelivery)
	g.POST("/webhooks/deliveries/:deliveryId/replay", d.uiWebhookReplay, SameOrigin)
	g.GET("/webhooks/:subscriptionId", d.uiWebhook)
	g.POST("/webhooks/:subscriptionId/enable", d.uiWebhookEnable, SameOrigin)
	g.POST("/webhooks/:subscriptionId/disable", d.uiWebhookDisable, SameOrigin)
}

// adminOnly refuses a viewer who is not the admin: subscriptions name
// receivers and their deliveries carry the events' data, which the admin
// API alone shows.
func adminOnly(c echo.Context) error {
	if !c.Get(ViewerKey).(Viewer).Admin {
		return echo.NewHTTPError(http.StatusForbidden, "only the admin sees and manages webhooks")
	}
	return nil
}

// webhooksPage is the data of the subscriptions' page.
type webhooksPage struct {
	Viewer        Viewer
	Enabled       bool
	Subscriptions []webhook.Subscription
	EventTypes    []string
}

// uiWebhooks is GET /ui/webhooks.
func (d *Dashboard) uiWebhooks(c echo.Context) error {
	if err := adminOnly(c); err != nil {
		return err
	}
	subs, err := d.webhooks.List(c.Request().Context())
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, "webhooks.html", webhooksPage{Viewer: c.Get(ViewerKey).(Viewer), Enabled: d.webhooks.Enabled(),
		Subscriptions: subs, EventTypes: webhook.EventTypes()})
}

// webhookPage is the data of a subscription's page.
type webhookPage struct {
	Viewer       Viewer
	Subscription webhook.Subscription
	Deliveries   []webhook.Delivery
	Notice       string
}

// webhookNotices are what ?done= on the webhook pages may say.
var webhookNotices = map[string]string{"enabled": "Subscription enabled.", "disabled": "Subscription disabled.", "replayed": "Delivery replayed."}

// uiWebhook is GET /ui/webhooks/:subscriptionId: the subscription and its
// last deliveries.
func (d *Dashboard) uiWebhook(c echo.Context) error {
	if err := adminOnly(c); err != nil {
		return err
	}
	ctx := c.Request().Context()
	sub, err := d.webhooks.Get(ctx, c.Param("subscriptionId"))
	if err != nil {
		return err
	}
	ds, err := d.webhooks.Deliveries(ctx, sub.ID, "", webhookDeliveriesShown)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, "webhook.html", webhookPage{Viewer: c.Get(ViewerKey).(Viewer), Subscription: sub, Deliveries: ds,
		Notice: webhookNotices[c.QueryParam("done")]})
}

// deliveryPage is the data of a delivery's page.
type deliveryPage struct {
	Viewer   Viewer
	Delivery webhook.Delivery
	Notice   string
}

// uiWebhookDelivery is GET /ui/webhooks/deliveries/:deliveryId: the
// delivery's payload and attempts, and its replay button.
func (d *Dashboard) uiWebhookDelivery(c echo.Context) error {
	if err := adminOnly(c); err != nil {
		return err
	}
	return d.renderDelivery(c, http.StatusOK, webhookNotices[c.QueryParam("done")])
}

// renderDelivery renders a delivery's page with a notice.
func (d *Dashboard) renderDelivery(c echo.Context, code int, notice string) error {
	del, err := d.webhooks.Delivery(c.Request().Context(), c.Param("deliveryId"))
	if err != nil {
		return err
	}
	return render(c, code, "delivery.html", deliveryPage{Viewer: c.Get(ViewerKey).(Viewer), Delivery: del, Notice: notice})
}

// uiWebhookReplay is POST /ui/webhooks/deliveries/:deliveryId/replay, the
// replay button. A refusal (still being attempted, subscription disabled)
// is the delivery's page, 409, with the reason.
func (d *Dashboard) uiWebhookReplay(c echo.Context) error {
	if err := adminOnly(c); err != nil {
		return err
	}
	d.logAdmin(c, "webhook replay")
	_, err := d.webhooks.Replay(c.Request().Context(), d.river, c.Param("deliveryId"))
	switch {
	case errors.Is(err, problem.ErrConflict):
		return d.renderDelivery(c, http.StatusConflict, err.Error())
	case err != nil:
		return err
	}
	return c.Redirect(http.StatusSeeOther, uiPrefix+"/webhooks/deliveries/"+url.PathEscape(c.Param("deliveryId"))+"?done=replayed")
}

// uiWebhookEnable is POST /ui/webhooks/:subscriptionId/enable.
func (d *Dashboard) uiWebhookEnable(c echo.Context) error { return d.uiWebhookSet(c, true) }

// uiWebhookDisable is POST /ui/webhooks/:subscriptionId/disable.
func (d *Dashboard) uiWebhookDisable(c echo.Context) error { return d.uiWebhookSet(c, false) }

// uiWebhookSet enables or disables a subscription, then shows its page.
func (d *Dashboard) uiWebhookSet(c echo.Context, enabled bool) error {
	if err := adminOnly(c); err != nil {
		return err
	}
	done := map[bool]string{true: "enabled", false: "disabled"}[enabled]
	d.logAdmin(c, "webhook "+done)
	if _, err := d.webhooks.SetEnabled(c.Request().Context(), c.Param("subscriptionId"), enabled, c.FormValue("reason")); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, uiPrefix+"/webhooks/"+url.PathEscape(c.Param("subscriptionId"))+"?done="+done)
}
