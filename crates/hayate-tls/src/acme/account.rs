//! The ACME account: loaded from the store, or registered once (with a
//! shared store, by the box holding the `account` lock).

use std::time::Duration;

use instant_acme::{Account, AccountCredentials, NewAccount};

use super::order::LOCK_TTL;
use super::Acme;
use crate::acme_store::AcmeStore;

/// How long a box waits for the account another box registers.
const ACCOUNT_WAIT: Duration = Duration::from_secs(30);

impl Acme {
    /// The account, loaded or registered on first use.
    pub(super) async fn account_ready<'a>(
        &self,
        account: &'a mut Option<Account>,
    ) -> Result<&'a Account, String> {
        if account.is_none() {
            *account = Some(self.account().await?);
        }
        Ok(account.as_ref().expect("set above"))
    }

    /// The account: loaded from the store, or registered (and stored) on
    /// first use. With a shared store, a box that ran alone before shares
    /// its account, and only the holder of the `account` lock registers.
    async fn account(&self) -> Result<Account, String> {
        if let Some(text) = self.storage.load_account().await? {
            if self.storage.is_shared() {
                if let Err(e) = self.local.write_account(&text) {
                    log::warn!("ACME: {e}");
                }
            }
            return self.account_from(&text).await;
        }
        if !self.storage.is_shared() {
            return self.register().await;
        }
        if let Some(text) = self.local.load_account().await? {
            self.storage.save_account(&text).await?;
            return self.account_from(&text).await;
        }
        let Some(lock) = self.storage.lock("account", LOCK_TTL).await? else {
            return self.account_registered_elsewhere().await;
        };
        let result = match self.storage.load_account().await {
            Ok(Some(text)) => self.account_from(&text).await,
            Ok(None) => self.register().await,
            Err(e) => Err(e),
        };
        if let Err(e) = self.storage.unlock(&lock).await {
            log::warn!("ACME: releasing the account lock (it expires by itself): {e}");
        }
        result
    }

    /// The account another box is registering, once it is stored: looked
    /// for after 100 ms, then at doubling intervals, for up to ACCOUNT_WAIT
    /// (a registration is one or two requests to the CA).
    async fn account_registered_elsewhere(&self) -> Result<Account, String> {
        let until = tokio::time::Instant::now() + ACCOUNT_WAIT;
        let mut pause = Duration::from_millis(100);
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(pause).await;
            if let Some(text) = self.storage.load_account().await? {
                return self.account_from(&text).await;
            }
            pause = (pause * 2).min(Duration::from_secs(5));
        }
        Err("another box is registering the ACME account, and has not stored it yet".into())
    }

    fn builder(&self) -> Result<instant_acme::AccountBuilder, String> {
        match &self.settings.ca_root {
            Some(root) => Account::builder_with_root(root),
            None => Account::builder(),
        }
        .map_err(|e| e.to_string())
    }

    async fn account_from(&self, credentials: &str) -> Result<Account, String> {
        let credentials: AccountCredentials =
            serde_json::from_str(credentials).map_err(|e| format!("the ACME account: {e}"))?;
        self.builder()?
            .from_credentials(credentials)
            .await
            .map_err(|e| format!("loading the ACME account: {e}"))
    }

    /// Registers an account and stores it (in the state directory too).
    async fn register(&self) -> Result<Account, String> {
        let contact = self.settings.email.as_ref().map(|e| format!("mailto:{e}"));
        let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
        let (account, credentials) = self
            .builder()?
            .create(
                &NewAccount {
                    contact: &contacts,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.settings.directory.clone(),
                None,
            )
            .await
            .map_err(|e| format!("registering an account at {}: {e}", self.settings.directory))?;
        let text = serde_json::to_string(&credentials).map_err(|e| e.to_string())?;
        self.local.write_account(&text)?;
        if self.storage.is_shared() {
            self.storage.save_account(&text).await?;
        }
        log::info!("ACME: registered an account at {}", self.settings.directory);
        Ok(account)
    }
}
